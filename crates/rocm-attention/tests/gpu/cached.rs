//! A decode step's attention over a key/value cache against the unfused ops on the CPU (f64):
//! `cached_attention` for every dtype, mask, cache dtype and path, unaligned views and bad
//! input; `rope_kv_write` against the rope and the cache scatter.

use candle_core::{DType as C, Tensor};
use rocm_attention::{self as rr, DType, Error, Layout, Operand as O};
use rocm_test_support::*;

/// softmax(q k^T * scale + mask) v of the same values in f64 on the CPU, with query head h
/// reading kv head h / group; `last[i]` is the last position query i sees.
fn attention_reference(q: &Tensor, k: &Tensor, v: &Tensor, scale: f64, last: &[usize]) -> Tensor {
    let up = |t: &Tensor| t.to_dtype(C::F64).unwrap();
    let (q, k, v) = (up(q), up(k), up(v));
    let (_, heads, t, _) = q.dims4().unwrap();
    let (_, kv_heads, len, _) = k.dims4().unwrap();
    let of_head: Vec<u32> = (0..heads)
        .map(|h| (h / (heads / kv_heads)) as u32)
        .collect();
    let of_head = Tensor::new(of_head.as_slice(), q.device()).unwrap();
    let k = k.index_select(&of_head, 1).unwrap();
    let v = v.index_select(&of_head, 1).unwrap();
    let mask: Vec<f64> = (0..t)
        .flat_map(|i| (0..len).map(move |j| if j <= last[i] { 0.0 } else { f64::NEG_INFINITY }))
        .collect();
    let mask = Tensor::from_vec(mask, (t, len), q.device()).unwrap();
    let scores = (q.matmul(&k.t().unwrap()).unwrap() * scale)
        .unwrap()
        .broadcast_add(&mask)
        .unwrap();
    candle_nn::ops::softmax_last_dim(&scores)
        .unwrap()
        .matmul(&v)
        .unwrap()
}

/// Seeded q `[b, heads, t, hd]` of `q_dtype` and k, v `[b, kv, len, hd]` of `cache`.
fn attention_inputs(
    (q_dtype, cache): (DType, DType),
    (b, heads, kv, t, len, hd): (usize, usize, usize, usize, usize, usize),
    seed: u64,
) -> (Tensor, Tensor, Tensor) {
    let q = tensor(
        &random(q_dtype, b * heads * t * hd, -2.0, 2.0, seed),
        q_dtype,
        &[b, heads, t, hd],
    );
    let kv_of = |lo: f32, hi: f32, seed: u64| {
        tensor(
            &random(cache, b * kv * len * hd, lo, hi, seed),
            cache,
            &[b, kv, len, hd],
        )
    };
    (q, kv_of(-2.0, 2.0, seed + 1), kv_of(-3.0, 3.0, seed + 2))
}

#[test]
fn cached_attention_matches_the_unfused_ops() {
    let d = device();
    // (batch, heads, kv_heads, queries, cache_len, head_dim): a decode step of a GQA llama,
    // several chunks of keys (cache over 256), one key, multi-query, odd sizes, head_dim 256;
    // for the grouped split, groups of 4, 3 and 8 heads, 12 heads a kv head in two blocks of 6,
    // 16 in two of 8, and 7 (qwen2's) in one; enough groups (64 sequences) that a split's runs
    // take several tiles
    let shapes = [
        (1usize, 32usize, 8usize, 1usize, 512usize, 64usize),
        (1, 4, 4, 1, 1, 64),
        (2, 6, 2, 3, 700, 80),
        (1, 8, 1, 5, 37, 128),
        (1, 2, 2, 2, 300, 256),
        (3, 3, 3, 1, 257, 7),
        (2, 24, 2, 2, 130, 128),
        (3, 16, 1, 1, 200, 256),
        (2, 14, 2, 1, 333, 64),
        (64, 32, 8, 2, 300, 64),
    ];
    let mut checked = 0;
    for dtype in [DType::BF16, DType::F16, DType::F32, DType::F64] {
        for (n, &(b, heads, kv, t, len, hd)) in shapes.iter().enumerate() {
            let (q, k, v) =
                attention_inputs((dtype, dtype), (b, heads, kv, t, len, hd), 100 + n as u64);
            let (qb, kb, vb) = (upload(&d, &q), upload(&d, &k), upload(&d, &v));
            let (ql, kl) = (layout_of(&q), layout_of(&k));
            let scale = 1.0 / (hd as f64).sqrt();
            // positions: some before the cache's end, one past it (clamped)
            let positions: Vec<u32> = (0..t)
                .map(|i| ((len * (i + 1)) / (t + 1) + 3 * i) as u32)
                .collect();
            let positions = {
                let mut p = positions;
                if t > 1 {
                    p[t - 1] = len as u32 + 5;
                }
                p
            };
            let pos_t = Tensor::new(positions.as_slice(), &candle_core::Device::Cpu).unwrap();
            let (pb, pl) = (upload(&d, &pos_t), layout_of(&pos_t));
            // each batch its own positions ([b, t]): batch i's earlier by 5 i
            let own: Vec<u32> = (0..b)
                .flat_map(|i| {
                    positions
                        .iter()
                        .map(move |&p| p.saturating_sub(5 * i as u32))
                })
                .collect();
            let own_t = Tensor::from_vec(own.clone(), (b, t), &candle_core::Device::Cpu).unwrap();
            let (ob, ol) = (upload(&d, &own_t), layout_of(&own_t));
            let seen = |p: &[u32]| -> Vec<usize> {
                p.iter().map(|&p| (p as usize).min(len - 1)).collect()
            };
            // the last position each query of each batch sees
            let masks = [
                ("none", rr::AttentionMask::None, vec![vec![len - 1; t]; b]),
                (
                    "causal",
                    rr::AttentionMask::Causal,
                    vec![(0..t).map(|i| len - t + i).collect(); b],
                ),
                (
                    "positions",
                    rr::AttentionMask::Positions(O::new(&pb, DType::U32, &pl)),
                    vec![seen(&positions); b],
                ),
                (
                    "positions of each batch",
                    rr::AttentionMask::Positions(O::new(&ob, DType::U32, &ol)),
                    own.chunks(t).map(seen).collect(),
                ),
            ];
            // the four forms: one block a row, and split over the cache with a combining
            // launch, a query row a block or a kv head's query heads a block, on the matrix
            // units where the cache is 16-bit and heads are whole 16-byte packs (elsewhere the
            // grouped split)
            let paths = [
                rr::AttentionPath::OneBlockARow,
                rr::AttentionPath::Split,
                rr::AttentionPath::GroupedSplit,
                rr::AttentionPath::MatrixSplit,
            ];
            let masks = masks
                .into_iter()
                .flat_map(|m| paths.map(|p| (m.0, m.1, m.2.clone(), p)));
            for (name, mask, last, path) in masks {
                let got = rr::cached_attention_via(
                    &d,
                    (
                        O::new(&qb, dtype, &ql),
                        O::new(&kb, dtype, &kl),
                        O::new(&vb, dtype, &kl),
                    ),
                    mask,
                    scale as f32,
                    path,
                )
                .unwrap_or_else(|e| panic!("{dtype} {name} {path:?} case {n}: {e}"));
                let batch = |x: &Tensor, i: usize| x.narrow(0, i, 1).unwrap();
                let want = (0..b)
                    .map(|i| {
                        let (q, k, v) = (batch(&q, i), batch(&k, i), batch(&v, i));
                        attention_reference(&q, &k, &v, scale as f32 as f64, &last[i])
                    })
                    .collect::<Vec<_>>();
                let want = Tensor::cat(&want, 0).unwrap();
                let want = if dtype == DType::F64 {
                    want
                } else {
                    want.to_dtype(cdtype(dtype)).unwrap()
                };
                // f32 scores over up to 700 keys of 256 products: a few ulps per step
                let slack = match dtype {
                    DType::F64 => 1e3,
                    DType::F32 => 64.0,
                    _ => 4.0,
                };
                compare(&download(&d, &got), &bytes_of(&want), dtype, slack).unwrap_or_else(|e| {
                    panic!("{dtype} {name} {path:?} case {n} {:?}: {e}", shapes[n])
                });
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 4 * 10 * 4 * 4);
}

#[test]
fn cached_attention_over_a_16_bit_cache_is_f32_attention_over_its_values() {
    // f32 queries over an f16 or bf16 cache: the f32 attention over the cache's values (each
    // widened exactly), every form, the masks of a decode step and of a prompt; f16 queries
    // over an f32 cache are a typed error
    let d = device();
    // the last two: queries past f16's range and below its normal numbers (the scale makes up
    // for them), which the matrix form scales by a power of two a row before splitting
    let shapes = [
        (1usize, 32usize, 8usize, 1usize, 512usize, 128usize, 1.0f64),
        (2, 6, 2, 3, 700, 80, 1.0),
        (3, 3, 3, 1, 257, 7, 1.0),
        (2, 8, 2, 1, 300, 64, 1e5),
        (2, 8, 2, 1, 300, 64, 1e-6),
    ];
    let mut checked = 0;
    for cache in [DType::F16, DType::BF16] {
        for (n, &(b, heads, kv, t, len, hd, q_mul)) in shapes.iter().enumerate() {
            let (q, k, v) = attention_inputs(
                (DType::F32, cache),
                (b, heads, kv, t, len, hd),
                300 + n as u64,
            );
            let q = (q * q_mul).unwrap();
            let (qb, kb, vb) = (upload(&d, &q), upload(&d, &k), upload(&d, &v));
            let (ql, kl) = (layout_of(&q), layout_of(&k));
            let scale = 1.0 / (hd as f64).sqrt() / q_mul;
            let positions: Vec<u32> = (0..t).map(|i| (len / 2 + 5 * i) as u32).collect();
            let pos_t = Tensor::new(positions.as_slice(), &candle_core::Device::Cpu).unwrap();
            let (pb, pl) = (upload(&d, &pos_t), layout_of(&pos_t));
            let masks = [
                (
                    "causal",
                    rr::AttentionMask::Causal,
                    (0..t).map(|i| len - t + i).collect::<Vec<_>>(),
                ),
                (
                    "positions",
                    rr::AttentionMask::Positions(O::new(&pb, DType::U32, &pl)),
                    positions.iter().map(|&p| p as usize).collect(),
                ),
            ];
            let paths = [
                rr::AttentionPath::OneBlockARow,
                rr::AttentionPath::Split,
                rr::AttentionPath::GroupedSplit,
                rr::AttentionPath::MatrixSplit,
            ];
            for (name, mask, last) in masks {
                for path in paths {
                    let got = rr::cached_attention_via(
                        &d,
                        (
                            O::new(&qb, DType::F32, &ql),
                            O::new(&kb, cache, &kl),
                            O::new(&vb, cache, &kl),
                        ),
                        mask,
                        scale as f32,
                        path,
                    )
                    .unwrap_or_else(|e| panic!("{cache} cache {name} {path:?} case {n}: {e}"));
                    let want = attention_reference(&q, &k, &v, scale as f32 as f64, &last)
                        .to_dtype(C::F32)
                        .unwrap();
                    // the f32 queries' slack of cached_attention_matches_the_unfused_ops
                    compare(&download(&d, &got), &bytes_of(&want), DType::F32, 64.0)
                        .unwrap_or_else(|e| panic!("{cache} cache {name} {path:?} case {n}: {e}"));
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 2 * 5 * 2 * 4);
    // f16 queries over an f32 cache, and f32 queries over caches of two dtypes: typed errors
    let buf = d.alloc(1 << 16).unwrap();
    let (ql, kl) = (
        Layout::contiguous(&[1, 2, 1, 16]),
        Layout::contiguous(&[1, 2, 8, 16]),
    );
    for (qd, kd, vd) in [
        (DType::F16, DType::F32, DType::F32),
        (DType::F32, DType::F16, DType::BF16),
        (DType::BF16, DType::F16, DType::F16),
    ] {
        let e = rr::cached_attention(
            &d,
            O::new(&buf, qd, &ql),
            O::new(&buf, kd, &kl),
            O::new(&buf, vd, &kl),
            rr::AttentionMask::None,
            1.0,
        )
        .unwrap_err();
        assert!(
            matches!(e, Error::DTypeMismatch { .. }),
            "{qd} {kd} {vd}: {e}"
        );
    }
}

#[test]
fn cached_attention_rejects_bad_input_with_typed_errors() {
    let d = device();
    let f32s = |dims: &[usize]| {
        let n = dims.iter().product();
        tensor(&random(DType::F32, n, -1.0, 1.0, 5), DType::F32, dims)
    };
    let q = f32s(&[1, 6, 1, 16]);
    let k = f32s(&[1, 4, 10, 16]);
    let k_ok = f32s(&[1, 3, 10, 16]);
    let q16 = tensor(
        &random(DType::F16, 96, -1.0, 1.0, 6),
        DType::F16,
        &[1, 6, 1, 16],
    );
    let long = f32s(&[1, 3, 1, 300]);
    let long_k = f32s(&[1, 3, 10, 300]);
    let (qb, kb, okb, q16b) = (
        upload(&d, &q),
        upload(&d, &k),
        upload(&d, &k_ok),
        upload(&d, &q16),
    );
    let (lb, lkb) = (upload(&d, &long), upload(&d, &long_k));
    let (ql, kl, okl, q16l) = (
        layout_of(&q),
        layout_of(&k),
        layout_of(&k_ok),
        layout_of(&q16),
    );
    let (ll, lkl) = (layout_of(&long), layout_of(&long_k));
    let run = |q: O<'_>, k: O<'_>, mask| rr::cached_attention(&d, q, k, k, mask, 1.0);
    let none = rr::AttentionMask::None;
    // 6 heads over 4 kv heads
    let e = run(
        O::new(&qb, DType::F32, &ql),
        O::new(&kb, DType::F32, &kl),
        none,
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::ShapeMismatch {
                op: "cached_attention",
                ..
            }
        ),
        "{e}"
    );
    // q f16, k f32
    let e = run(
        O::new(&q16b, DType::F16, &q16l),
        O::new(&okb, DType::F32, &okl),
        none,
    )
    .unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
    // head_dim 300
    let e = run(
        O::new(&lb, DType::F32, &ll),
        O::new(&lkb, DType::F32, &lkl),
        none,
    )
    .unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { .. }) && e.to_string().contains("300"),
        "{e}"
    );
    // integer dtype
    let e = run(
        O::new(&qb, DType::U32, &ql),
        O::new(&okb, DType::U32, &okl),
        none,
    )
    .unwrap_err();
    assert!(matches!(e, Error::UnsupportedDType { .. }), "{e}");
    // positions of the wrong dtype and count
    let e = run(
        O::new(&qb, DType::F32, &ql),
        O::new(&okb, DType::F32, &okl),
        rr::AttentionMask::Positions(O::new(&okb, DType::F32, &okl)),
    )
    .unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { .. }) && e.to_string().contains("u32"),
        "{e}"
    );
    // causal with more queries than positions
    let q_many = f32s(&[1, 3, 11, 16]);
    let (qmb, qml) = (upload(&d, &q_many), layout_of(&q_many));
    let e = run(
        O::new(&qmb, DType::F32, &qml),
        O::new(&okb, DType::F32, &okl),
        rr::AttentionMask::Causal,
    )
    .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    // the well-formed call runs
    run(
        O::new(&qb, DType::F32, &ql),
        O::new(&okb, DType::F32, &okl),
        none,
    )
    .unwrap();
}

#[test]
fn cached_attention_reads_unaligned_views() {
    // k and v one element into their buffers: rows are not 16-byte packs, the element path runs
    let d = device();
    let (heads, kv, len, hd) = (8usize, 2usize, 300usize, 64usize);
    for dtype in [DType::BF16, DType::F32] {
        let q = tensor(
            &random(dtype, heads * hd, -2.0, 2.0, 11),
            dtype,
            &[1, heads, 1, hd],
        );
        let n = kv * len * hd;
        // the bases are uploaded whole; the views' layouts start one element in
        let base = |seed| tensor(&random(dtype, n + 1, -2.0, 2.0, seed), dtype, &[n + 1]);
        let view = |b: &Tensor| {
            b.narrow(0, 1, n)
                .unwrap()
                .reshape((1, kv, len, hd))
                .unwrap()
        };
        let (k_base, v_base) = (base(12), base(13));
        let (k, v) = (view(&k_base), view(&v_base));
        let (qb, kb, vb) = (upload(&d, &q), upload(&d, &k_base), upload(&d, &v_base));
        let (ql, kl, vl) = (layout_of(&q), layout_of(&k), layout_of(&v));
        assert_eq!(kl.start, 1);
        let got = rr::cached_attention(
            &d,
            O::new(&qb, dtype, &ql),
            O::new(&kb, dtype, &kl),
            O::new(&vb, dtype, &vl),
            rr::AttentionMask::None,
            0.125,
        )
        .unwrap();
        let want = attention_reference(&q, &k, &v, 0.125, &[len - 1]);
        let want = want.to_dtype(cdtype(dtype)).unwrap();
        compare(&download(&d, &got), &bytes_of(&want), dtype, 64.0)
            .unwrap_or_else(|e| panic!("{dtype} unaligned: {e}"));
    }
}

#[test]
fn rope_kv_write_is_the_rope_and_the_cache_scatter() {
    // q/k/v heads of t tokens at positions (one past the cache), grouped-query heads, both
    // pair orders, against the rotation and the cache rows computed on the host; cache rows
    // at other positions keep what they held.
    let d = device();
    let (heads, kv_heads, hd, cache_len, max_len) = (4usize, 2usize, 8usize, 6usize, 8usize);
    let width = (heads + 2 * kv_heads) * hd;
    let half = hd / 2;
    let mut checked = 0;
    // (qkv's dtype, the caches'): one dtype, or a 16-bit cache under f32
    let dtypes = [
        (DType::F32, DType::F32),
        (DType::F16, DType::F16),
        (DType::F32, DType::F16),
        (DType::F32, DType::BF16),
    ];
    // positions of one sequence, or (per_token) of t sequences a token each, each with a cache
    let cases = [
        (vec![4u32], false),
        (vec![1, 5, 6], false),
        (vec![1, 5, 1, 6], true),
    ];
    // qwen3's per-head norms of q and k first, or none
    let eps = 1e-6;
    for (dtype, cache) in dtypes {
        for (positions, per_token) in cases.clone() {
            for (interleaved, normed) in
                [(true, false), (false, false), (false, true), (true, true)]
            {
                let t = positions.len();
                let caches = if per_token { t } else { 1 };
                let qkv = values(&random(dtype, t * width, -2.0, 2.0, 3), dtype);
                let cos = values(&random(dtype, max_len * half, -1.0, 1.0, 4), dtype);
                let sin = values(&random(dtype, max_len * half, -1.0, 1.0, 5), dtype);
                let up_as = |v: &[f64], dims: &[usize], to: DType| {
                    let t = Tensor::from_vec(v.to_vec(), dims, &candle_core::Device::Cpu).unwrap();
                    upload(&d, &t.to_dtype(cdtype(to)).unwrap())
                };
                let up = |v: &[f64], dims: &[usize]| up_as(v, dims, dtype);
                let sentinel = vec![7.0f64; caches * kv_heads * cache_len * hd];
                let (qb, cb, sb) = (
                    up(&qkv, &[t, width]),
                    up(&cos, &[max_len, half]),
                    up(&sin, &[max_len, half]),
                );
                let (kb, vb) = (
                    up_as(&sentinel, &[sentinel.len()], cache),
                    up_as(&sentinel, &[sentinel.len()], cache),
                );
                let pb = d.htod(&positions).unwrap();
                let norm_w = values(&random(dtype, 2 * hd, 0.5, 1.5, 6), dtype);
                let (nq, nk) = (up(&norm_w[..hd], &[hd]), up(&norm_w[hd..], &[hd]));
                let nl = Layout::contiguous(&[hd]);
                let qk_norm = normed.then(|| rr::QkNorm {
                    q: O::new(&nq, dtype, &nl),
                    k: O::new(&nk, dtype, &nl),
                    eps: eps as f32,
                });
                let (ql, csl, pl) = (
                    Layout::contiguous(&[1, t, width]),
                    Layout::contiguous(&[max_len, half]),
                    Layout::contiguous(&[t]),
                );
                let cache_l = Layout::contiguous(&[caches, kv_heads, cache_len, hd]);
                let q = rr::rope_kv_write(
                    &d,
                    O::new(&qb, dtype, &ql),
                    (O::new(&cb, dtype, &csl), O::new(&sb, dtype, &csl)),
                    O::new(pb.as_buffer(), DType::U32, &pl),
                    rr::KvCache {
                        k: O::new(&kb, cache, &cache_l),
                        v: O::new(&vb, cache, &cache_l),
                    },
                    heads,
                    interleaved,
                    qk_norm,
                )
                .unwrap();
                let (q, k, v) = (
                    values(&download(&d, &q), dtype),
                    values(&download(&d, &kb), cache),
                    values(&download(&d, &vb), cache),
                );
                let (mut want_q, mut want_k, mut want_v) = (
                    vec![0.0; heads * t * hd],
                    sentinel.clone(),
                    sentinel.clone(),
                );
                for (i, &pos) in positions.iter().enumerate() {
                    let pos = pos as usize;
                    let row = &qkv[i * width..(i + 1) * width];
                    for h in 0..heads + kv_heads {
                        let mut x = row[h * hd..(h + 1) * hd].to_vec();
                        if normed {
                            // the norm's output in the dtype, as rms_norm writes it
                            let w = &norm_w[if h < heads { 0 } else { hd }..][..hd];
                            let ms = x.iter().map(|v| v * v).sum::<f64>() / hd as f64;
                            let scale = 1.0 / (ms + eps).sqrt();
                            let n: Vec<f64> = x.iter().zip(w).map(|(v, w)| v * scale * w).collect();
                            let n = Tensor::from_vec(n, hd, &candle_core::Device::Cpu).unwrap();
                            x = values(&bytes_of(&n.to_dtype(cdtype(dtype)).unwrap()), dtype);
                        }
                        let mut y = x.clone();
                        if pos < cache_len {
                            for p in 0..half {
                                let (i1, i2) = if interleaved {
                                    (2 * p, 2 * p + 1)
                                } else {
                                    (p, p + half)
                                };
                                let (c, s) = (cos[pos * half + p], sin[pos * half + p]);
                                y[i1] = x[i1] * c - x[i2] * s;
                                y[i2] = x[i1] * s + x[i2] * c;
                            }
                        }
                        // q as [heads, t, hd], or [t, heads, hd] a sequence a token; the
                        // token's own cache
                        let (q_row, c) = if per_token {
                            (i * heads + h, i)
                        } else {
                            (h * t + i, 0)
                        };
                        if h < heads {
                            want_q[q_row * hd..(q_row + 1) * hd].copy_from_slice(&y);
                        } else if pos < cache_len {
                            let at = ((c * kv_heads + h - heads) * cache_len + pos) * hd;
                            want_k[at..at + hd].copy_from_slice(&y);
                            let vh = &row[(heads + kv_heads + h - heads) * hd..][..hd];
                            want_v[at..at + hd].copy_from_slice(vh);
                        }
                    }
                }
                // one rounding of the result to its dtype (and of k to the f32 rotation first):
                // half a unit in the last place, doubled for the f32 rotation's own rounding
                let tol = |dt: DType| match dt {
                    DType::F32 => 1e-6,
                    DType::F16 => 4e-3,
                    _ => 8e-3,
                };
                for (what, got, want, dt) in [
                    ("q", &q, &want_q, dtype),
                    ("k", &k, &want_k, cache),
                    ("v", &v, &want_v, cache),
                ] {
                    for (j, (g, w)) in got.iter().zip(want.iter()).enumerate() {
                        assert!(
                            (g - w).abs() <= tol(dt) * w.abs().max(1.0),
                            "{dtype} over a {cache} cache, positions {positions:?} (a cache a token: {per_token}) interleaved {interleaved} normed {normed}: {what}[{j}] {g} vs {w}"
                        );
                    }
                }
                checked += 1;
            }
        }
    }
    // a cache whose head_dim differs from the other's, and qkv of the wrong width: typed errors
    let buf = d.alloc(1 << 12).unwrap();
    let p = d.htod(&[0u32]).unwrap();
    let pl = Layout::contiguous(&[1]);
    let cs = Layout::contiguous(&[8, 4]);
    // qkv [1, width] over caches of (k, v) dims, with norm weights (dims, dtype) or none
    let call = |qkv_width: usize,
                (k_dims, v_dims): (&[usize], &[usize]),
                norm: Option<(&[usize], DType)>| {
        let (ql, kl, vl) = (
            Layout::contiguous(&[1, qkv_width]),
            Layout::contiguous(k_dims),
            Layout::contiguous(v_dims),
        );
        let wl = Layout::contiguous(norm.map_or(&[][..], |(dims, _)| dims));
        rr::rope_kv_write(
            &d,
            O::new(&buf, DType::F32, &ql),
            (O::new(&buf, DType::F32, &cs), O::new(&buf, DType::F32, &cs)),
            O::new(p.as_buffer(), DType::U32, &pl),
            rr::KvCache {
                k: O::new(&buf, DType::F32, &kl),
                v: O::new(&buf, DType::F32, &vl),
            },
            4,
            true,
            norm.map(|(_, dtype)| rr::QkNorm {
                q: O::new(&buf, dtype, &wl),
                k: O::new(&buf, dtype, &wl),
                eps: 1e-6,
            }),
        )
    };
    let cache = [2usize, 6, 8];
    assert!(call(64, (&cache, &cache), None).is_ok());
    assert!(call(64, (&cache, &cache), Some((&[8], DType::F32))).is_ok());
    for (w, v_dims) in [(64, &[2usize, 6, 4][..]), (60, &cache)] {
        let e = call(w, (&cache, v_dims), None).unwrap_err();
        assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    }
    // two caches for one token: neither one cache nor one a token
    let two = [2usize, 2, 6, 8];
    let e = call(64, (&two, &two), None).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    // norm weights of another length than a head, or of another dtype than qkv
    for norm in [(&[6usize][..], DType::F32), (&[8], DType::F16)] {
        let e = call(64, (&cache, &cache), Some(norm)).unwrap_err();
        assert!(
            matches!(e, Error::ShapeMismatch { .. } | Error::DTypeMismatch { .. }),
            "{e}"
        );
    }
    println!("rope_kv_write: {checked} dtype x positions x order x norm cases");
}
