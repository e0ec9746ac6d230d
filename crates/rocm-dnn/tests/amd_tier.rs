//! The AMD tier of rocm-dnn: run by `cargo xtask test` inside the ROCm 6.4 chroot (MIOpen
//! loads there; no GPU is needed for descriptors). Every symbol of the MIOpen FFI table
//! resolves; enum values and struct layouts equal the header's (printed by the probe xtask
//! builds against the chroot's headers); and for a grid of convolutions and pooling windows,
//! MIOpen's own output-dim functions agree with the dims we compute.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rocm_device::DType;
use rocm_dnn::miopen::{self, abi, MiOpenLib};
use rocm_dnn::*;

fn probe() -> String {
    let path = std::env::var("CANDLE_ROCM_ABI_PROBE")
        .expect("CANDLE_ROCM_ABI_PROBE names the probe output");
    std::fs::read_to_string(path).expect("probe output readable")
}

#[test]
fn every_miopen_symbol_resolves() {
    let status = miopen::library_status();
    println!("MIOpen: {:?} (tried {:?})", status.found, status.tried);
    let lib = MiOpenLib::load().expect("MIOpen loads and every symbol resolves");
    println!(
        "AMD tier: {} MIOpen symbols resolve: {lib:?}",
        miopen::Functions::SYMBOLS.len()
    );
}

#[test]
fn miopen_enums_and_structs_match_the_header() {
    let checked = rocm_device::abi::check_against_probe(abi::TABLES, &probe())
        .unwrap_or_else(|problems| panic!("{}", problems.join("\n")));
    println!("AMD tier: {checked} MIOpen enum values and struct offsets equal the header's");
}

/// The conv2d / conv_transpose2d / conv1d / conv_transpose1d grid of the GPU tests.
fn specs() -> Vec<ConvSpec> {
    let mut specs = Vec::new();
    for k in [1, 3, 4, 5, 7] {
        for stride in [1, 2, 3] {
            for (padding, dilation) in [(0, 1), (1, 1), (2, 2), (1, 3)] {
                for (c_in, c_out, groups) in [(3, 5, 1), (4, 6, 2), (4, 8, 4), (8, 8, 8)] {
                    for (h, w) in [(11, 13), (5, 7), (1, 17)] {
                        let p = Conv2dParams {
                            b_size: 2,
                            i_h: h,
                            i_w: w,
                            k_h: if h == 1 { 1 } else { k },
                            k_w: k,
                            c_out,
                            c_in,
                            padding,
                            stride,
                            dilation,
                            groups,
                        };
                        specs.extend(ConvSpec::conv2d(&p));
                        specs.extend(ConvSpec::conv1d(&Conv1dParams {
                            b_size: 2,
                            l_in: w,
                            c_out,
                            c_in,
                            k_size: k,
                            padding,
                            stride,
                            dilation,
                            groups,
                        }));
                        for output_padding in [0, 1, 2] {
                            specs.extend(ConvSpec::conv_transpose2d(&ConvTranspose2dParams {
                                b_size: 2,
                                i_h: h,
                                i_w: w,
                                k_h: p.k_h,
                                k_w: k,
                                c_out,
                                c_in,
                                padding,
                                output_padding,
                                stride,
                                dilation,
                                groups,
                            }));
                            specs.extend(ConvSpec::conv_transpose1d(&ConvTranspose1dParams {
                                b_size: 2,
                                l_in: w,
                                c_out,
                                c_in,
                                k_size: k,
                                padding,
                                output_padding,
                                stride,
                                dilation,
                                groups,
                            }));
                        }
                    }
                }
            }
        }
    }
    specs
}

#[test]
fn our_convolution_dims_equal_miopens() {
    let lib = MiOpenLib::load().unwrap();
    let dt = miopen::data_type(DType::F32).unwrap();
    let (mut forward, mut transpose, mut portable) = (0, 0, 0);
    let mut failures = Vec::new();
    for spec in specs() {
        let outcome = || -> rocm_device::Result<Option<String>> {
            let w = miopen::tensor(&lib, dt, spec.kernel_dims())?;
            let x = miopen::tensor(&lib, dt, spec.input_dims())?;
            let conv = miopen::convolution(&lib, &spec, abi::MIOPEN_CONVOLUTION)?;
            if spec.direction == Direction::Forward {
                let got = miopen::conv_output_dims(&lib, &conv, &x, &w)?;
                return Ok((got != spec.output_dims()).then(|| format!("forward {got:?}")));
            }
            // MIOpen's transpose mode, with our output padding, gives our output dims (and
            // refuses an output padding not below the stride: those take the portable path)...
            let transposed = miopen::convolution(&lib, &spec, abi::MIOPEN_TRANSPOSE)?;
            let got = miopen::conv_output_dims(&lib, &transposed, &x, &w);
            if !miopen::takes(&spec) {
                return Ok(got.is_ok().then(|| "transpose mode accepts it".into()));
            }
            if got? != spec.output_dims() {
                return Ok(Some("transpose mode dims".into()));
            }
            // ...and the forward convolution of our output, whose backward-data pass the
            // MIOpen path runs, gives back our input dims.
            let y = miopen::tensor(&lib, dt, spec.output_dims())?;
            let back = miopen::conv_output_dims(&lib, &conv, &y, &w)?;
            Ok((back != spec.input_dims()).then(|| format!("backward data {back:?}")))
        };
        match outcome() {
            Ok(None) => {}
            Ok(Some(m)) => failures.push(format!("{spec:?}: {m}")),
            Err(e) => failures.push(format!("{spec:?}: {e}")),
        }
        match spec.direction {
            Direction::Forward => forward += 1,
            Direction::Transpose if miopen::takes(&spec) => transpose += 1,
            Direction::Transpose => portable += 1,
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} disagree:\n{}",
        failures.len(),
        forward + transpose + portable,
        failures[..failures.len().min(20)].join("\n")
    );
    assert!(forward > 500 && transpose > 500, "{forward} {transpose}");
    println!(
        "AMD tier: MIOpen agrees on the output dims of {forward} convolutions and {transpose} \
         transposed convolutions (transpose mode and backward data); it refuses the \
         {portable} with an output padding not below the stride, which stay portable"
    );
}

#[test]
fn our_pooling_dims_equal_miopens() {
    let lib = MiOpenLib::load().unwrap();
    let dt = miopen::data_type(DType::F16).unwrap();
    let mut n = 0;
    for kernel in [(1, 1), (2, 2), (3, 3), (2, 3), (7, 9)] {
        for stride in [(1, 1), (2, 2), (3, 1), (1, 2)] {
            for (h, w) in [(7, 9), (8, 8), (9, 13), (224, 224)] {
                let p = Pool2dParams { kernel, stride };
                let (Some(oh), Some(ow)) = (
                    params::pool_out_len(h, kernel.0, stride.0),
                    params::pool_out_len(w, kernel.1, stride.1),
                ) else {
                    continue;
                };
                for mode in [abi::MIOPEN_POOLING_MAX, abi::MIOPEN_POOLING_AVERAGE] {
                    let pool = miopen::pooling(&lib, mode, &p).unwrap();
                    let x = miopen::tensor(&lib, dt, [2, 3, h, w]).unwrap();
                    let got = miopen::pool_output_dims(&lib, &pool, &x).unwrap();
                    assert_eq!(got, [2, 3, oh, ow], "{p:?} on {h}x{w}");
                    n += 1;
                }
            }
        }
    }
    println!("AMD tier: MIOpen agrees on the output dims of {n} pooling windows");
}
