//! All-reduce bandwidth of rocm-ccl over every device of the machine (one rank a device, on
//! threads), timed with device events on rank 0 after a barrier; one JSON object per line with
//! the algorithm and bus bandwidth (NCCL's convention: bus = alg x 2 (n - 1) / n).
//! `bench/torch_ccl.py` runs torch.distributed on the same sizes and writes the table.

use std::time::Duration;

use rocm_ccl::{Comm, ReduceOp, Rendezvous};
use rocm_device::{DType, Device, Layout, Operand};

const SIZES_MIB: [usize; 5] = [1, 8, 32, 128, 256];
const ITERS: usize = 20;

fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let size = rocm_device::selected_platform()?.device_count()?;
    let rendezvous = Rendezvous::Tcp("127.0.0.1:29631".into());
    std::thread::scope(
        |s| -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
            let handles: Vec<_> = (0..size)
            .map(|rank| {
                let rendezvous = rendezvous.clone();
                s.spawn(move || -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
                    let device = Device::new(rank)?;
                    let id = rendezvous.exchange(rank, size, Duration::from_secs(60), || {
                        rocm_ccl::unique_id(&device)
                    })?;
                    let comm = Comm::init(&device, &id, rank, size, Duration::from_secs(120))?;
                    for dtype in [DType::BF16, DType::F32] {
                        for mib in SIZES_MIB {
                            let bytes = mib << 20;
                            let n = bytes / dtype.size_in_bytes();
                            let buf = device.alloc(bytes)?;
                            device.memset(&buf, 0, bytes, 0)?;
                            let layout = Layout::contiguous(&[n]);
                            let x = Operand::new(&buf, dtype, &layout);
                            for _ in 0..3 {
                                comm.all_reduce(x, x, ReduceOp::Sum)?;
                            }
                            comm.wait()?;
                            let (start, end) = (device.create_event()?, device.create_event()?);
                            start.record(device.stream())?;
                            for _ in 0..ITERS {
                                comm.all_reduce(x, x, ReduceOp::Sum)?;
                            }
                            end.record(device.stream())?;
                            comm.wait()?;
                            end.synchronize()?;
                            let ms = f64::from(start.elapsed_ms(&end)?) / ITERS as f64;
                            if rank == 0 {
                                let alg = bytes as f64 / (ms * 1e-3) / 1e9;
                                let bus = alg * 2.0 * (size - 1) as f64 / size as f64;
                                println!(
                                    "{{\"bench\": \"all_reduce\", \"peer\": \"rocm-ccl\", \"ranks\": {size}, \"dtype\": \"{}\", \"bytes\": {bytes}, \"ms\": {ms:.4}, \"algbw_gbs\": {alg:.1}, \"busbw_gbs\": {bus:.1}}}",
                                    dtype.as_str()
                                );
                            }
                        }
                    }
                    Ok(())
                })
            })
            .collect();
            for h in handles {
                h.join().map_err(|_| "a rank panicked")??;
            }
            Ok(())
        },
    )
}
