//! GPU tests of rocm-indexing against Candle 0.11.1's CPU backend. Gathers, sets, nearest
//! upsampling and arg_sort must be exact; so must every sum of the ownership scatter (it adds
//! in the CPU's order) and integer sums of the atomic one. Atomic float sums may round in
//! another order; bilinear f8e4m3 is compared with the f32 computation (Candle 0.11.1's f8e4m3
//! to f64 never returns).
//!
//! One file, one test binary: each GPU test binary links Candle's CPU reference and travels in
//! the GPU pack, so a crate's GPU suite stays one target (the pack's size and link time).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use candle_core::{DType as C, Tensor};
use rand::Rng;
use rocm_indexing::{
    self as ri, Bilinear, DType, Error, IndexOptions, Layout, Operand, ScatterStrategy,
};
use rocm_test_support::*;

/// Marks a masked id in the logical id values of a test.
const MASK: i64 = i64::MIN;
const ID_DTYPES: [DType; 5] = [DType::U8, DType::U32, DType::I16, DType::I32, DType::I64];
/// The id dtypes Candle's CPU backend accepts for index_select, gather and scatter.
const CPU_SELECT_IDS: [DType; 3] = [DType::U8, DType::U32, DType::I64];

fn id_max(dt: DType) -> i64 {
    match dt {
        DType::U8 => 0xff,
        DType::U32 => 0xffff_ffff,
        DType::I16 => 0x7fff,
        DType::I32 => 0x7fff_ffff,
        _ => i64::MAX,
    }
}

/// Ids of dtype `dt` holding `vals` (MASK -> the dtype's maximum).
fn ids_tensor(vals: &[i64], dt: DType, dims: &[usize]) -> Tensor {
    let w = dt.size_in_bytes();
    let bytes: Vec<u8> = vals
        .iter()
        .flat_map(|&v| {
            let v = if v == MASK { id_max(dt) } else { v };
            v.to_le_bytes()[..w].to_vec()
        })
        .collect();
    tensor(&bytes, dt, dims)
}

/// The CPU reference ids of a view: contiguous i64, masked ids as i64::MAX.
fn ref_ids(view: &Tensor, dt: DType) -> Tensor {
    let v: Vec<i64> = view
        .flatten_all()
        .unwrap()
        .to_dtype(C::I64)
        .unwrap()
        .to_vec1()
        .unwrap();
    let max = id_max(dt);
    let v: Vec<i64> = v
        .into_iter()
        .map(|x| if x == max { i64::MAX } else { x })
        .collect();
    Tensor::from_vec(v, view.dims(), &candle_core::Device::Cpu).unwrap()
}

/// Random ids in [0, n) with about one in eight masked.
fn random_ids(len: usize, n: usize, seed: u64) -> Vec<i64> {
    let mut r = rng(seed);
    (0..len)
        .map(|_| {
            if r.random_range(0..8) == 0 {
                MASK
            } else {
                r.random_range(0..n as i64)
            }
        })
        .collect()
}

fn opts() -> IndexOptions {
    IndexOptions::default()
}

fn view<'a>(dt: DType, buf: &'a ri::Buffer, l: &'a Layout) -> Operand<'a> {
    Operand::new(buf, dt, l)
}

fn ids_of<'a>(dt: DType, buf: &'a ri::Buffer, l: &'a Layout) -> Operand<'a> {
    Operand::new(buf, dt, l)
}

/// Source views of a (5, 7, 33) tensor: contiguous, a start offset, a permutation.
fn source_views(dtype: DType, seed: u64) -> Vec<(&'static str, Tensor, Tensor)> {
    let make = |dims: &[usize], s: u64| {
        tensor(
            &random(dtype, dims.iter().product(), -100.0, 100.0, seed ^ s),
            dtype,
            dims,
        )
    };
    let a = make(&[5, 7, 33], 1);
    let b = make(&[5, 7, 35], 2);
    let c = make(&[33, 5, 7], 3);
    vec![
        ("contiguous", a.clone(), a),
        ("narrowed", b.clone(), b.narrow(2, 1, 33).unwrap()),
        ("permuted", c.clone(), c.permute((1, 2, 0)).unwrap()),
    ]
}

#[test]
fn index_select_matches_the_cpu_backend() {
    let d = device();
    let mut checked = 0;
    for dtype in ALL {
        let mut views = source_views(dtype, 11);
        // rows of 512 elements starting on a row boundary: the row kernel with 16-byte units
        let rows = tensor(
            &random(dtype, 21 * 512, -100.0, 100.0, 5),
            dtype,
            &[21, 512],
        );
        views.push(("aligned rows", rows.clone(), rows.narrow(0, 1, 20).unwrap()));
        for (name, base, src) in &views {
            let src_buf = upload(&d, base);
            let src_l = layout_of(src);
            for dim in 0..src.rank() {
                let vals = random_ids(9, src.dims()[dim], 100 + dim as u64);
                for idt in ID_DTYPES {
                    // strided ids: every other element of a (9, 2) tensor
                    let pairs: Vec<i64> = vals.iter().flat_map(|&v| [7, v]).collect();
                    let ids_base = ids_tensor(&pairs, idt, &[9, 2]);
                    let ids_view = ids_base.narrow(1, 1, 1).unwrap().squeeze(1).unwrap();
                    let (ids_buf, ids_l) = (upload(&d, &ids_base), layout_of(&ids_view));
                    let got = ri::index_select(
                        &d,
                        view(dtype, &src_buf, &src_l),
                        ids_of(idt, &ids_buf, &ids_l),
                        dim,
                        &opts(),
                    )
                    .unwrap_or_else(|e| panic!("{dtype} {name} dim {dim} {idt}: {e}"));
                    let want = src
                        .contiguous()
                        .unwrap()
                        .index_select(&ref_ids(&ids_view, idt), dim)
                        .unwrap();
                    compare(&download(&d, &got), &bytes_of(&want), dtype, 0.0).unwrap_or_else(
                        |e| panic!("index_select {dtype} {name} dim {dim} {idt}: {e}"),
                    );
                    checked += 1;
                }
            }
        }
    }
    println!("index_select: {checked} cases");
}

#[test]
fn gather_matches_the_cpu_backend() {
    let d = device();
    let mut checked = 0;
    for dtype in ALL {
        for (name, base, src) in source_views(dtype, 12) {
            let src_buf = upload(&d, &base);
            let src_l = layout_of(&src);
            for dim in 0..3 {
                // 40 ids along the last dim of contiguous tensors: the per-row kernel
                for m in [4usize, 12, 40] {
                    if m == 40 && dim != 2 {
                        continue;
                    }
                    let mut dims = src.dims().to_vec();
                    dims[dim] = m;
                    let n: usize = dims.iter().product();
                    let vals = random_ids(n, src.dims()[dim], 200 + dim as u64 + m as u64);
                    for idt in ID_DTYPES {
                        // contiguous ids, and the same shape as a transposed view
                        let flipped: Vec<usize> = dims.iter().rev().copied().collect();
                        let flat = ids_tensor(&vals, idt, &dims);
                        let flip = ids_tensor(&vals, idt, &flipped);
                        let id_cases = [
                            (flat.clone(), flat),
                            (flip.clone(), flip.permute((2, 1, 0)).unwrap()),
                        ];
                        for (ids_base, ids_view) in &id_cases {
                            let ids_buf = upload(&d, ids_base);
                            let ids_l = layout_of(ids_view);
                            let got = ri::gather(
                                &d,
                                view(dtype, &src_buf, &src_l),
                                ids_of(idt, &ids_buf, &ids_l),
                                dim,
                                &opts(),
                            )
                            .unwrap();
                            let want = src
                                .contiguous()
                                .unwrap()
                                .gather(&ref_ids(ids_view, idt), dim)
                                .unwrap();
                            compare(&download(&d, &got), &bytes_of(&want), dtype, 0.0)
                                .unwrap_or_else(|e| {
                                    panic!("gather {dtype} {name} dim {dim} m {m} {idt}: {e}")
                                });
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    println!("gather: {checked} cases");
}

/// The destination view after an in-place op on the device copy of its base.
fn view_after(
    d: &ri::Device,
    buf: &ri::Buffer,
    base: &Tensor,
    make: &dyn Fn(&Tensor) -> Tensor,
) -> Vec<u8> {
    let after = tensor(
        &download(d, buf),
        DType::ALL[dtype_index(base.dtype())],
        base.dims(),
    );
    bytes_of(&make(&after))
}

fn dtype_index(c: C) -> usize {
    ALL.iter().position(|&d| cdtype(d) == c).unwrap()
}

/// Sums of `m` updates of magnitude <= 50 onto values <= 50: exact under ownership and for
/// integers; atomic float sums round in another order, off by up to one rounding of each
/// partial sum (|partial| <= 50 (m + 1)).
fn check_sums(
    got: &[u8],
    want: &Tensor,
    dtype: DType,
    strategy: ScatterStrategy,
    m: usize,
) -> Result<(), String> {
    if strategy == ScatterStrategy::Ownership || dtype.is_int() {
        return compare(got, &bytes_of(want), dtype, 0.0);
    }
    let (_, rtol) = tolerance(dtype);
    let bound = (m + 1) as f64 * rtol * 50.0 * (m + 1) as f64;
    let (g, w) = (values(got, dtype), values(&bytes_of(want), dtype));
    match (0..g.len()).find(|&i| (g[i] - w[i]).abs() > bound) {
        Some(i) => Err(format!(
            "element {i}: got {}, expected {} (bound {bound})",
            g[i], w[i]
        )),
        None => Ok(()),
    }
}

const STRATEGIES: [ScatterStrategy; 3] = [
    ScatterStrategy::Auto,
    ScatterStrategy::Ownership,
    ScatterStrategy::PerUpdate,
];

/// Destination views of a (6, 5, 9) tensor: contiguous, and a permutation of another base.
/// (name, base dims, view of the base).
type DestView = (&'static str, Vec<usize>, fn(&Tensor) -> Tensor);

fn dest_views() -> Vec<DestView> {
    vec![
        ("contiguous", vec![6, 5, 9], |t: &Tensor| t.clone()),
        ("permuted", vec![9, 6, 5], |t: &Tensor| {
            t.permute((1, 2, 0)).unwrap()
        }),
    ]
}

#[test]
fn scatter_and_scatter_add_match_the_cpu_backend() {
    let d = device();
    let mut checked = 0;
    for dtype in ALL {
        for (dname, base_dims, make) in dest_views() {
            for dim in 0..3 {
                for m in [3usize, 11] {
                    let mut sdims = vec![6, 5, 9];
                    sdims[dim] = m;
                    let n: usize = sdims.iter().product();
                    let src = tensor(
                        &random(dtype, n, -50.0, 50.0, 300 + m as u64),
                        dtype,
                        &sdims,
                    );
                    let src_buf = upload(&d, &src);
                    let src_l = layout_of(&src);
                    let vals = random_ids(n, [6, 5, 9][dim], 400 + dim as u64 + m as u64);
                    let base = tensor(
                        &random(dtype, 270, -50.0, 50.0, 500 + dim as u64),
                        dtype,
                        &base_dims,
                    );
                    let dst = make(&base);
                    for idt in ID_DTYPES {
                        let ids = ids_tensor(&vals, idt, &sdims);
                        let (ids_buf, ids_l) = (upload(&d, &ids), layout_of(&ids));
                        let rids = ref_ids(&ids, idt);
                        for add in [false, true] {
                            if !add && !CPU_SELECT_IDS.contains(&idt) {
                                continue;
                            }
                            let want = if add {
                                dst.contiguous()
                                    .unwrap()
                                    .scatter_add(&rids, &src, dim)
                                    .unwrap()
                            } else {
                                dst.contiguous().unwrap().scatter(&rids, &src, dim).unwrap()
                            };
                            for strategy in STRATEGIES {
                                let buf = upload(&d, &base);
                                let dst_l = layout_of(&dst);
                                let o = IndexOptions { strategy, ..opts() };
                                let f = if add {
                                    ri::scatter_add_set
                                } else {
                                    ri::scatter_set
                                };
                                f(
                                    &d,
                                    (
                                        view(dtype, &buf, &dst_l),
                                        ids_of(idt, &ids_buf, &ids_l),
                                        view(dtype, &src_buf, &src_l),
                                    ),
                                    dim,
                                    &o,
                                )
                                .unwrap();
                                let got = view_after(&d, &buf, &base, &make);
                                let r = if add {
                                    check_sums(&got, &want, dtype, strategy, m)
                                } else {
                                    compare(&got, &bytes_of(&want), dtype, 0.0)
                                };
                                r.unwrap_or_else(|e| {
                                    panic!(
                                        "scatter add={add} {dtype} {dname} dim {dim} m {m} {idt} {strategy:?}: {e}"
                                    )
                                });
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
    }
    println!("scatter / scatter_add: {checked} cases");
}

#[test]
fn index_add_matches_the_cpu_backend() {
    let d = device();
    let mut checked = 0;
    for dtype in ALL {
        for (dname, base_dims, make) in dest_views() {
            for dim in 0..3 {
                for m in [4usize, 13] {
                    let mut sdims = [6, 5, 9];
                    sdims[dim] = m;
                    let n: usize = sdims.iter().product();
                    // a transposed source view
                    let flipped: Vec<usize> = sdims.iter().rev().copied().collect();
                    let src_base = tensor(
                        &random(dtype, n, -50.0, 50.0, 600 + m as u64),
                        dtype,
                        &flipped,
                    );
                    let src = src_base.permute((2, 1, 0)).unwrap();
                    let src_buf = upload(&d, &src_base);
                    let src_l = layout_of(&src);
                    let vals = random_ids(m, [6, 5, 9][dim], 700 + dim as u64 + m as u64);
                    let base = tensor(&random(dtype, 270, -50.0, 50.0, 800), dtype, &base_dims);
                    let dst = make(&base);
                    for idt in ID_DTYPES {
                        let pairs: Vec<i64> = vals.iter().flat_map(|&v| [v, 1]).collect();
                        let ids_base = ids_tensor(&pairs, idt, &[m, 2]);
                        let ids_view = ids_base.narrow(1, 0, 1).unwrap().squeeze(1).unwrap();
                        let (ids_buf, ids_l) = (upload(&d, &ids_base), layout_of(&ids_view));
                        let want = dst
                            .contiguous()
                            .unwrap()
                            .index_add(&ref_ids(&ids_view, idt), &src.contiguous().unwrap(), dim)
                            .unwrap();
                        for strategy in STRATEGIES {
                            let buf = upload(&d, &base);
                            let dst_l = layout_of(&dst);
                            let o = IndexOptions { strategy, ..opts() };
                            ri::index_add_set(
                                &d,
                                (
                                    view(dtype, &buf, &dst_l),
                                    ids_of(idt, &ids_buf, &ids_l),
                                    view(dtype, &src_buf, &src_l),
                                ),
                                dim,
                                &o,
                            )
                            .unwrap();
                            let got = view_after(&d, &buf, &base, &make);
                            check_sums(&got, &want, dtype, strategy, m).unwrap_or_else(|e| {
                                panic!("index_add {dtype} {dname} dim {dim} m {m} {idt} {strategy:?}: {e}")
                            });
                            checked += 1;
                        }
                    }
                }
            }
        }
    }
    println!("index_add: {checked} cases");
}

#[test]
fn heavy_collisions_sum_exactly_for_integers() {
    // 2^20 updates onto 3 positions: the atomic path must not lose one
    let d = device();
    let n = 1 << 20;
    for dtype in [DType::U32, DType::I32, DType::I64, DType::I16, DType::U8] {
        let src = tensor(&random(dtype, n, 0.0, 1.0, 9), dtype, &[1, n]);
        let vals: Vec<i64> = (0..n as i64).map(|i| i % 3).collect();
        let ids = ids_tensor(&vals, DType::I64, &[1, n]);
        let base = tensor(&random(dtype, 3, 0.0, 1.0, 10), dtype, &[1, 3]);
        let want = base.scatter_add(&ids, &src, 1).unwrap();
        for strategy in STRATEGIES {
            let buf = upload(&d, &base);
            let (bl, il, sl) = (layout_of(&base), layout_of(&ids), layout_of(&src));
            let (ib, sb) = (upload(&d, &ids), upload(&d, &src));
            ri::scatter_add_set(
                &d,
                (
                    view(dtype, &buf, &bl),
                    ids_of(DType::I64, &ib, &il),
                    view(dtype, &sb, &sl),
                ),
                1,
                &IndexOptions { strategy, ..opts() },
            )
            .unwrap();
            compare(&download(&d, &buf), &bytes_of(&want), dtype, 0.0)
                .unwrap_or_else(|e| panic!("{dtype} {strategy:?}: {e}"));
        }
    }
}

#[test]
fn out_of_range_ids_are_skipped_or_reported() {
    let d = device();
    let src = tensor(
        &random(DType::F32, 4 * 6, -1.0, 1.0, 1),
        DType::F32,
        &[4, 6],
    );
    let (sb, sl) = (upload(&d, &src), layout_of(&src));
    let checked = IndexOptions {
        check_indices: true,
        ..opts()
    };
    for idt in [DType::I64, DType::I32, DType::U32] {
        let signed = idt != DType::U32;
        let bad_vals: Vec<i64> = vec![1, 4, if signed { -3 } else { 1000 }, 2];
        let ids = ids_tensor(&bad_vals, idt, &[4]);
        let (ib, il) = (upload(&d, &ids), layout_of(&ids));
        // unchecked: out-of-range rows read as zero, like masked ones; checked: a typed error
        // naming the size. Rows of 6 take the general kernel, rows of 256 the row kernel.
        let masked = ids_tensor(&[1, MASK, MASK, 2], DType::I64, &[4]);
        let wide = tensor(
            &random(DType::F32, 4 * 256, -1.0, 1.0, 2),
            DType::F32,
            &[4, 256],
        );
        for x in [&src, &wide] {
            let (xb, xl) = (upload(&d, x), layout_of(x));
            let got = ri::index_select(
                &d,
                view(DType::F32, &xb, &xl),
                ids_of(idt, &ib, &il),
                0,
                &opts(),
            )
            .unwrap();
            let want = x.index_select(&ref_ids(&masked, DType::I64), 0).unwrap();
            compare(&download(&d, &got), &bytes_of(&want), DType::F32, 0.0).unwrap();
            match ri::index_select(
                &d,
                view(DType::F32, &xb, &xl),
                ids_of(idt, &ib, &il),
                0,
                &checked,
            ) {
                Err(Error::IndexOutOfRange {
                    size, count, index, ..
                }) => {
                    // two bad ids, each met once or once per element of its row
                    assert_eq!(size, 4);
                    assert!(count >= 2, "{count} lookups");
                    assert!(index == 4 || index == bad_vals[2], "reported {index}");
                }
                other => panic!("{idt}: expected IndexOutOfRange, got {other:?}"),
            }
        }
        // scatter_add and index_add skip them, or report them
        let dst = Tensor::zeros((4, 6), C::F32, &candle_core::Device::Cpu).unwrap();
        for strategy in [ScatterStrategy::Ownership, ScatterStrategy::PerUpdate] {
            let buf = upload(&d, &dst);
            let dl = layout_of(&dst);
            let o = IndexOptions { strategy, ..opts() };
            ri::index_add_set(
                &d,
                (
                    view(DType::F32, &buf, &dl),
                    ids_of(idt, &ib, &il),
                    view(DType::F32, &sb, &sl),
                ),
                0,
                &o,
            )
            .unwrap();
            let want = dst
                .index_add(&ref_ids(&masked, DType::I64), &src, 0)
                .unwrap();
            compare(&download(&d, &buf), &bytes_of(&want), DType::F32, 0.0).unwrap();
            let o = IndexOptions {
                strategy,
                check_indices: true,
            };
            let r = ri::index_add_set(
                &d,
                (
                    view(DType::F32, &buf, &dl),
                    ids_of(idt, &ib, &il),
                    view(DType::F32, &sb, &sl),
                ),
                0,
                &o,
            );
            assert!(
                // each bad id is met once per column
                matches!(
                    r,
                    Err(Error::IndexOutOfRange {
                        count: 12,
                        size: 4,
                        ..
                    })
                ),
                "{r:?}"
            );
            let ids2 = ids_tensor(
                &[
                    4, 0, 0, 0, 0, 0, 9, 9, 9, 9, 9, 9, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2,
                ],
                idt,
                &[4, 6],
            );
            let (ib2, il2) = (upload(&d, &ids2), layout_of(&ids2));
            for set in [false, true] {
                let f = if set {
                    ri::scatter_set
                } else {
                    ri::scatter_add_set
                };
                let r = f(
                    &d,
                    (
                        view(DType::F32, &buf, &dl),
                        ids_of(idt, &ib2, &il2),
                        view(DType::F32, &sb, &sl),
                    ),
                    0,
                    &o,
                );
                assert!(
                    matches!(
                        r,
                        Err(Error::IndexOutOfRange {
                            count: 7,
                            size: 4,
                            ..
                        })
                    ),
                    "{r:?}"
                );
            }
        }
    }
}

#[test]
fn empty_and_invalid_inputs() {
    let d = device();
    let src = tensor(&random(DType::F32, 12, -1.0, 1.0, 1), DType::F32, &[3, 4]);
    let (sb, sl) = (upload(&d, &src), layout_of(&src));
    let ids = ids_tensor(&[], DType::U32, &[0]);
    let (ib, il) = (upload(&d, &ids), layout_of(&ids));
    let out = ri::index_select(
        &d,
        view(DType::F32, &sb, &sl),
        ids_of(DType::U32, &ib, &il),
        1,
        &opts(),
    )
    .unwrap();
    assert_eq!(out.len(), 0);
    // a float id dtype, a 2-D id tensor, a dim past the rank
    let fl = Layout::contiguous(&[3]);
    let r = ri::index_select(
        &d,
        view(DType::F32, &sb, &sl),
        ids_of(DType::F32, &sb, &fl),
        0,
        &opts(),
    );
    assert!(
        matches!(
            r,
            Err(Error::UnsupportedDType {
                dtype: DType::F32,
                ..
            })
        ),
        "{r:?}"
    );
    let two = Layout::contiguous(&[1, 2]);
    let r = ri::index_select(
        &d,
        view(DType::F32, &sb, &sl),
        ids_of(DType::U8, &sb, &two),
        0,
        &opts(),
    );
    assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "{r:?}");
    let one = Layout::contiguous(&[2]);
    let r = ri::index_select(
        &d,
        view(DType::F32, &sb, &sl),
        ids_of(DType::U8, &sb, &one),
        2,
        &opts(),
    );
    assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "{r:?}");
    let r = ri::gather(
        &d,
        view(DType::F32, &sb, &sl),
        ids_of(DType::U8, &sb, &Layout::contiguous(&[2, 5])),
        0,
        &opts(),
    );
    assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "{r:?}");
    // ids larger than their buffer
    let big = Layout::contiguous(&[100]);
    let r = ri::index_select(
        &d,
        view(DType::F32, &sb, &sl),
        ids_of(DType::U32, &ib, &big),
        0,
        &opts(),
    );
    assert!(r.is_err());
    // scatter of an empty source: nothing happens
    let e = Layout::contiguous(&[0, 4]);
    ri::scatter_add_set(
        &d,
        (
            view(DType::F32, &sb, &sl),
            ids_of(DType::U32, &ib, &e),
            view(DType::F32, &sb, &e),
        ),
        0,
        &opts(),
    )
    .unwrap();
    assert_eq!(download(&d, &sb), bytes_of(&src));
}

#[test]
fn upsampling_matches_the_cpu_backend() {
    let d = device();
    let mut checked = 0;
    for dtype in ALL {
        let a = tensor(
            &random(dtype, 2 * 3 * 5 * 7, -100.0, 100.0, 21),
            dtype,
            &[2, 3, 5, 7],
        );
        let b = tensor(
            &random(dtype, 2 * 3 * 7 * 5, -100.0, 100.0, 22),
            dtype,
            &[2, 3, 7, 5],
        );
        for (name, base, x) in [
            ("contiguous", a.clone(), a.clone()),
            ("transposed", b.clone(), b.transpose(2, 3).unwrap()),
        ] {
            let (buf, l) = (upload(&d, &base), layout_of(&x));
            for (h, w) in [(10, 13), (3, 4), (5, 7), (1, 1)] {
                let got = ri::upsample_nearest2d(&d, view(dtype, &buf, &l), h, w).unwrap();
                let want = x.upsample_nearest2d(h, w).unwrap();
                compare(&download(&d, &got), &bytes_of(&want), dtype, 0.0)
                    .unwrap_or_else(|e| panic!("nearest2d {dtype} {name} {h}x{w}: {e}"));
                checked += 1;
                for align in [false, true] {
                    if (h, w) == (5, 7) && name != "contiguous" {
                        continue; // the CPU's same-size shortcut copies the raw storage
                    }
                    let p = Bilinear {
                        h_out: h,
                        w_out: w,
                        align_corners: align,
                        scale_factors: (None, None),
                    };
                    let got = ri::upsample_bilinear2d(&d, view(dtype, &buf, &l), p).unwrap();
                    check_bilinear(
                        &got,
                        &x,
                        dtype,
                        &|t| t.upsample_bilinear2d(h, w, align).unwrap(),
                        &format!("{name} {h}x{w} align {align}"),
                    );
                    checked += 1;
                }
            }
            // PyTorch's scale_factor mode: output floor(in * factor), positions from 1 / factor
            for (fh, fw) in [(2.0, 1.5), (0.5, 0.75), (1.7, 2.3)] {
                let (h, w) = (
                    (5.0f64 * fh).floor() as usize,
                    (7.0f64 * fw).floor() as usize,
                );
                let p = Bilinear {
                    h_out: h,
                    w_out: w,
                    align_corners: false,
                    scale_factors: (Some(fh), Some(fw)),
                };
                let got = ri::upsample_bilinear2d(&d, view(dtype, &buf, &l), p).unwrap();
                check_bilinear(
                    &got,
                    &x,
                    dtype,
                    &|t| t.upsample_bilinear2d_with_scale(fh, fw, false).unwrap(),
                    &format!("{name} x({fh}, {fw})"),
                );
                checked += 1;
            }
        }
        let s = tensor(
            &random(dtype, 2 * 3 * 9, -100.0, 100.0, 23),
            dtype,
            &[2, 9, 3],
        );
        let x = s.transpose(1, 2).unwrap();
        let (buf, l) = (upload(&d, &s), layout_of(&x));
        for w in [20, 4, 9, 1] {
            let got = ri::upsample_nearest1d(&d, view(dtype, &buf, &l), w).unwrap();
            let want = x.upsample_nearest1d(w).unwrap();
            compare(&download(&d, &got), &bytes_of(&want), dtype, 0.0)
                .unwrap_or_else(|e| panic!("nearest1d {dtype} {w}: {e}"));
            checked += 1;
        }
    }
    println!("upsampling: {checked} cases");
}

/// Bilinear results equal the CPU's; f8e4m3 against the f32 computation rounded to f8e4m3.
fn check_bilinear(
    got: &ri::Buffer,
    x: &Tensor,
    dtype: DType,
    f: &dyn Fn(&Tensor) -> Tensor,
    what: &str,
) {
    let d = device();
    let (want, slack) = if dtype == DType::F8E4M3 {
        (
            f(&x.to_dtype(C::F32).unwrap()).to_dtype(C::F8E4M3).unwrap(),
            1.0,
        )
    } else {
        (f(x), 0.0)
    };
    compare(&download(&d, got), &bytes_of(&want), dtype, slack)
        .unwrap_or_else(|e| panic!("bilinear {dtype} {what}: {e}"));
}

/// Values with many duplicates (and -0.0 next to 0.0 for floats).
fn sort_input(dtype: DType, n: usize, seed: u64) -> Tensor {
    let mut r = rng(seed);
    let vals: Vec<f32> = (0..n)
        .map(|_| {
            let v = r.random_range(-40i32..40) as f32 * 0.5;
            if v == 0.0 && r.random::<bool>() {
                -0.0
            } else {
                v
            }
        })
        .collect();
    let t = Tensor::from_vec(vals, n, &candle_core::Device::Cpu).unwrap();
    let t = if dtype.is_int() { t.abs().unwrap() } else { t };
    t.to_dtype(cdtype(dtype)).unwrap()
}

fn arg_sort_device(x: &Tensor, dtype: DType, asc: bool, base: &Tensor) -> Vec<u8> {
    let d = device();
    let (buf, l) = (upload(&d, base), layout_of(x));
    download(
        &d,
        &ri::arg_sort_last_dim(&d, view(dtype, &buf, &l), asc).unwrap(),
    )
}

#[test]
fn arg_sort_matches_the_cpu_backend() {
    let mut checked = 0;
    for dtype in ALL {
        for (rows, len) in [
            (3, 1),
            (4, 2),
            (3, 1000),
            (2, 2048),
            (2, 8193),
            (1, 100_000),
        ] {
            let x = sort_input(dtype, rows * len, (rows * len) as u64)
                .reshape((rows, len))
                .unwrap();
            for asc in [true, false] {
                let got = arg_sort_device(&x, dtype, asc, &x);
                let want = x.arg_sort_last_dim(asc).unwrap();
                compare(&got, &bytes_of(&want), DType::U32, 0.0)
                    .unwrap_or_else(|e| panic!("arg_sort {dtype} {rows}x{len} asc {asc}: {e}"));
                checked += 1;
            }
        }
        // a strided input (copied first)
        let base = sort_input(dtype, 300, 7).reshape((30, 10)).unwrap();
        let x = base.t().unwrap();
        let got = arg_sort_device(&x, dtype, true, &base);
        let want = x.contiguous().unwrap().arg_sort_last_dim(true).unwrap();
        compare(&got, &bytes_of(&want), DType::U32, 0.0).unwrap();
    }
    println!("arg_sort: {checked} cases");
}

#[test]
fn arg_sort_puts_nan_last_ascending_and_first_descending() {
    for dtype in [DType::F32, DType::F16, DType::BF16, DType::F64] {
        for len in [1000, 8193] {
            let x = sort_input(dtype, len, 3).to_dtype(C::F64).unwrap();
            let mut v: Vec<f64> = x.to_vec1().unwrap();
            for i in (0..len).step_by(37) {
                v[i] = f64::NAN;
            }
            let x = Tensor::from_vec(v.clone(), (1, len), &candle_core::Device::Cpu)
                .unwrap()
                .to_dtype(cdtype(dtype))
                .unwrap();
            let v: Vec<f64> = x
                .to_dtype(C::F64)
                .unwrap()
                .flatten_all()
                .unwrap()
                .to_vec1()
                .unwrap();
            // NaN greatest, -0.0 == 0.0, ties by position
            let key = |a: f64, b: f64| match (a.is_nan(), b.is_nan()) {
                (true, true) => std::cmp::Ordering::Equal,
                (true, false) => std::cmp::Ordering::Greater,
                (false, true) => std::cmp::Ordering::Less,
                _ => a.partial_cmp(&b).unwrap(),
            };
            for asc in [true, false] {
                let mut want: Vec<u32> = (0..len as u32).collect();
                if asc {
                    want.sort_by(|&i, &j| key(v[i as usize], v[j as usize]));
                } else {
                    want.sort_by(|&i, &j| key(v[j as usize], v[i as usize]));
                }
                let got = arg_sort_device(&x, dtype, asc, &x);
                let got: Vec<u32> = bytemuck::cast_slice(&got).to_vec();
                assert_eq!(got, want, "{dtype} {len} asc {asc}");
            }
        }
    }
}
