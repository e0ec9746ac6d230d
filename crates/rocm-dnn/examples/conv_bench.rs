//! The portable convolution path on typical layers, timed with device events: the whole call
//! (im2col + gemm, or gemm + col2im) and, as its floor, the gemm alone on the same matrices.
//! One JSON object per line; `bench/torch_conv.py` adds torch (cuDNN) on the same GPU.

use std::sync::Arc;

use rocm_bench_support::time_ms;
use rocm_blas::{Blas, MatmulShape};
use rocm_device::{DType, Device, Layout, Operand, Result};
use rocm_dnn::{Conv2dParams, ConvTranspose2dParams, Dnn, DnnOptions, Pool2dParams};

const ITERS: usize = 20;

/// (name, batch, c_in, c_out, h, w, k, stride, padding, transpose)
type Layer = (
    &'static str,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    usize,
    bool,
);

const LAYERS: [Layer; 5] = [
    ("resnet 3x3 64->64 56x56", 8, 64, 64, 56, 56, 3, 1, 1, false),
    (
        "sd-unet 3x3 320->320 64x64",
        8,
        320,
        320,
        64,
        64,
        3,
        1,
        1,
        false,
    ),
    (
        "sd-unet 1x1 320->320 64x64",
        8,
        320,
        320,
        64,
        64,
        1,
        1,
        0,
        false,
    ),
    (
        "resnet 7x7/2 3->64 224x224",
        8,
        3,
        64,
        224,
        224,
        7,
        2,
        3,
        false,
    ),
    (
        "convT 4x4/2 256->128 32x32",
        8,
        256,
        128,
        32,
        32,
        4,
        2,
        1,
        true,
    ),
];

fn main() -> Result<()> {
    let d = Device::new(0)?;
    let blas = Arc::new(Blas::new(&d)?);
    let dnn = Dnn::with_options(
        blas.clone(),
        DnnOptions {
            use_miopen: false,
            ..DnnOptions::default()
        },
    )?;
    for dtype in [DType::F16, DType::BF16] {
        let size = dtype.size_in_bytes();
        for (name, b, c_in, c_out, h, w, k, stride, padding, transpose) in LAYERS {
            let x = d.alloc(b * c_in * h * w * size)?;
            d.memset(&x, 0, x.len(), 0x1c)?;
            let xl = Layout::contiguous(&[b, c_in, h, w]);
            let (kdims, oh, ow) = if transpose {
                ([c_in, c_out, k, k], h, w)
            } else {
                let o = |n: usize| (n + 2 * padding - k) / stride + 1;
                ([c_out, c_in, k, k], o(h), o(w))
            };
            let kern = d.alloc(kdims.iter().product::<usize>() * size)?;
            d.memset(&kern, 0, kern.len(), 0x1c)?;
            let kl = Layout::contiguous(&kdims);
            let ours = time_ms(&d, ITERS, || {
                if transpose {
                    let p = ConvTranspose2dParams {
                        b_size: b,
                        i_h: h,
                        i_w: w,
                        k_h: k,
                        k_w: k,
                        c_out,
                        c_in,
                        padding,
                        output_padding: 0,
                        stride,
                        dilation: 1,
                        groups: 1,
                    };
                    dnn.conv_transpose2d(
                        Operand::new(&x, dtype, &xl),
                        Operand::new(&kern, dtype, &kl),
                        &p,
                    )
                } else {
                    let p = Conv2dParams {
                        b_size: b,
                        i_h: h,
                        i_w: w,
                        k_h: k,
                        k_w: k,
                        c_out,
                        c_in,
                        padding,
                        stride,
                        dilation: 1,
                        groups: 1,
                    };
                    dnn.conv2d(
                        Operand::new(&x, dtype, &xl),
                        Operand::new(&kern, dtype, &kl),
                        &p,
                    )
                }
                .map(drop)
            })?;
            // The gemm alone: (c_out x K) . (K x L) per batch entry for a convolution,
            // (c_out k k x c_in) . (c_in x L) for a transposed one.
            let (m, kk, l) = if transpose {
                (c_out * k * k, c_in, h * w)
            } else {
                (c_out, c_in * k * k, oh * ow)
            };
            let a = d.alloc(m * kk * size)?;
            let col = d.alloc(b * kk * l * size)?;
            d.memset(&a, 0, a.len(), 0x1c)?;
            d.memset(&col, 0, col.len(), 0x1c)?;
            let al = Layout::new(&[b, m, kk], &[0, kk, 1], 0);
            let cl = Layout::contiguous(&[b, kk, l]);
            let shape = MatmulShape {
                batch: b,
                m,
                n: l,
                k: kk,
            };
            let gemm = time_ms(&d, ITERS, || {
                blas.matmul(
                    Operand::new(&a, dtype, &al),
                    Operand::new(&col, dtype, &cl),
                    shape,
                )
                .map(drop)
            })?;
            let flops = 2.0 * (b * m * kk * l) as f64;
            println!(
                "{{\"layer\": \"{name}\", \"dtype\": \"{dtype}\", \"b\": {b}, \"c_in\": {c_in}, \"c_out\": {c_out}, \"h\": {h}, \"w\": {w}, \"k\": {k}, \"stride\": {stride}, \"padding\": {padding}, \"transpose\": {transpose}, \"ours_ms\": {ours:.4}, \"gemm_ms\": {gemm:.4}, \"ours_tflops\": {:.1}, \"gemm_tflops\": {:.1}}}",
                flops / ours / 1e9,
                flops / gemm / 1e9
            );
        }
        // Pooling: a memory-bound pass over a ResNet stem's output.
        let (b, c, h, w) = (8usize, 64usize, 112usize, 112usize);
        let x = d.alloc(b * c * h * w * size)?;
        d.memset(&x, 0, x.len(), 0x1c)?;
        let xl = Layout::contiguous(&[b, c, h, w]);
        for (name, max) in [
            ("max_pool2d 2x2/2 64x112x112", true),
            ("avg_pool2d 2x2/2 64x112x112", false),
        ] {
            let p = Pool2dParams {
                kernel: (2, 2),
                stride: (2, 2),
            };
            let ms = time_ms(&d, ITERS, || {
                if max {
                    dnn.max_pool2d(Operand::new(&x, dtype, &xl), &p)
                } else {
                    dnn.avg_pool2d(Operand::new(&x, dtype, &xl), &p)
                }
                .map(drop)
            })?;
            let bytes = b * c * h * w * size * 5 / 4;
            println!(
                "{{\"layer\": \"{name}\", \"dtype\": \"{dtype}\", \"pool\": true, \"max\": {max}, \"ours_ms\": {ms:.4}, \"gbps\": {:.1}}}",
                bytes as f64 / (ms * 1e-3) / 1e9
            );
        }
    }
    Ok(())
}
