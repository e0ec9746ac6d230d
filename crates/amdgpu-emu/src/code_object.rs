//! A code object's kernels: the 64-byte kernel descriptor at each `<kernel>.kd` symbol and
//! the metadata note's description of each kernel (arguments with their offsets and kinds,
//! the hidden arguments of code object v5 included), as LLVM's `AMDGPUUsage` defines them.

use crate::elf::{Elf, ReadLe, EM_AMDGPU};
use crate::msgpack::{self, Value};
use crate::{Error, Result};

/// `NT_AMDGPU_METADATA`: the note holding the MessagePack metadata.
const NT_AMDGPU_METADATA: u32 = 32;

/// The instruction set families the emulator knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arch {
    /// RDNA3: wave32 (or wave64 as two halves), WMMA.
    Gfx1100,
    /// CDNA3: wave64, MFMA with accumulation registers.
    Gfx942,
}

impl Arch {
    /// The processor name (`gfx1100`, `gfx942`).
    pub const fn name(self) -> &'static str {
        match self {
            Arch::Gfx1100 => "gfx1100",
            Arch::Gfx942 => "gfx942",
        }
    }

    /// From a target triple's processor (`amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-`).
    pub fn from_target(target: &str) -> Result<Self> {
        let processor = target
            .rsplit("--")
            .next()
            .unwrap_or(target)
            .split(':')
            .next()
            .unwrap_or("");
        match processor {
            "gfx1100" => Ok(Arch::Gfx1100),
            "gfx942" => Ok(Arch::Gfx942),
            other => Err(Error::UnsupportedArch(other.to_string())),
        }
    }
}

/// A kernel descriptor (`amd_kernel_code_t`'s successor: 64 bytes at `<kernel>.kd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelDescriptor {
    pub group_segment_fixed_size: u32,
    pub private_segment_fixed_size: u32,
    pub kernarg_size: u32,
    /// From the descriptor's own address to the kernel's first instruction.
    pub kernel_code_entry_byte_offset: i64,
    pub compute_pgm_rsrc3: u32,
    pub compute_pgm_rsrc1: u32,
    pub compute_pgm_rsrc2: u32,
    pub kernel_code_properties: u16,
    pub kernarg_preload: u16,
}

/// The user SGPRs a kernel asks for, in the order the hardware fills them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserSgpr {
    /// 4 SGPRs: the private segment's buffer resource.
    PrivateSegmentBuffer,
    /// 2 SGPRs: the address of the dispatch packet.
    DispatchPtr,
    /// 2 SGPRs: the address of the queue.
    QueuePtr,
    /// 2 SGPRs: the address of the kernel arguments.
    KernargSegmentPtr,
    /// 2 SGPRs: the dispatch's id.
    DispatchId,
    /// 2 SGPRs: flat scratch (where the target has it set up by the hardware).
    FlatScratchInit,
    /// 1 SGPR: the private segment's size a work-item.
    PrivateSegmentSize,
}

impl UserSgpr {
    pub const fn count(self) -> u32 {
        match self {
            UserSgpr::PrivateSegmentBuffer => 4,
            UserSgpr::PrivateSegmentSize => 1,
            _ => 2,
        }
    }
}

impl KernelDescriptor {
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        if bytes.len() < 64 {
            return Err(Error::Malformed(format!(
                "a kernel descriptor of {} bytes (64 needed)",
                bytes.len()
            )));
        }
        Ok(KernelDescriptor {
            group_segment_fixed_size: bytes.u32_at(0)?,
            private_segment_fixed_size: bytes.u32_at(4)?,
            kernarg_size: bytes.u32_at(8)?,
            kernel_code_entry_byte_offset: bytes.u64_at(16)? as i64,
            compute_pgm_rsrc3: bytes.u32_at(44)?,
            compute_pgm_rsrc1: bytes.u32_at(48)?,
            compute_pgm_rsrc2: bytes.u32_at(52)?,
            kernel_code_properties: bytes.u16_at(56)?,
            kernarg_preload: bytes.u16_at(58)?,
        })
    }

    /// The user SGPRs enabled by `kernel_code_properties`, in their order.
    pub fn user_sgprs(&self) -> Vec<UserSgpr> {
        [
            UserSgpr::PrivateSegmentBuffer,
            UserSgpr::DispatchPtr,
            UserSgpr::QueuePtr,
            UserSgpr::KernargSegmentPtr,
            UserSgpr::DispatchId,
            UserSgpr::FlatScratchInit,
            UserSgpr::PrivateSegmentSize,
        ]
        .into_iter()
        .enumerate()
        .filter(|(bit, _)| self.kernel_code_properties & (1 << bit) != 0)
        .map(|(_, s)| s)
        .collect()
    }

    /// `compute_pgm_rsrc2.USER_SGPR_COUNT`: user SGPRs the hardware sets up (at least the
    /// enabled ones, more where arguments are preloaded).
    pub fn user_sgpr_count(&self) -> u32 {
        (self.compute_pgm_rsrc2 >> 1) & 0x1f
    }

    /// Workgroup ids x, y, z the hardware puts in SGPRs after the user SGPRs.
    pub fn workgroup_ids(&self) -> [bool; 3] {
        [7, 8, 9].map(|bit| self.compute_pgm_rsrc2 & (1 << bit) != 0)
    }

    /// `ENABLE_SGPR_WORKGROUP_INFO`.
    pub fn workgroup_info(&self) -> bool {
        self.compute_pgm_rsrc2 & (1 << 10) != 0
    }

    /// Dimensions of work-item ids the kernel reads (1: x; 2: x, y; 3: x, y, z).
    pub fn workitem_id_dims(&self) -> u32 {
        ((self.compute_pgm_rsrc2 >> 11) & 3) + 1
    }

    /// `ENABLE_PRIVATE_SEGMENT` (scratch).
    pub fn private_segment(&self) -> bool {
        self.compute_pgm_rsrc2 & 1 != 0
    }

    /// `ENABLE_WAVEFRONT_SIZE32` (gfx10 and later).
    pub fn wave32(&self) -> bool {
        self.kernel_code_properties & (1 << 10) != 0
    }

    /// `compute_pgm_rsrc3.ACCUM_OFFSET` (gfx90a, gfx94x): the first accumulation register as
    /// a VGPR index of the unified file.
    pub fn accum_offset(&self) -> u32 {
        ((self.compute_pgm_rsrc3 & 0x3f) + 1) * 4
    }
}

/// What a kernel argument is (`.value_kind`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgKind {
    ByValue,
    GlobalBuffer,
    DynamicSharedPointer,
    /// A hidden argument the runtime fills (`hidden_block_count_x`, ...), by its name
    /// without the `hidden_` prefix.
    Hidden(String),
    Other(String),
}

impl ArgKind {
    fn from_name(name: &str) -> Self {
        match name {
            "by_value" => ArgKind::ByValue,
            "global_buffer" => ArgKind::GlobalBuffer,
            "dynamic_shared_pointer" => ArgKind::DynamicSharedPointer,
            n => match n.strip_prefix("hidden_") {
                Some(h) => ArgKind::Hidden(h.to_string()),
                None => ArgKind::Other(n.to_string()),
            },
        }
    }
}

/// One kernel argument: where it sits in the kernel argument segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelArg {
    pub offset: u32,
    pub size: u32,
    pub kind: ArgKind,
}

/// A kernel of a code object.
#[derive(Debug, Clone)]
pub struct KernelInfo {
    pub name: String,
    pub descriptor: KernelDescriptor,
    /// The descriptor's address in the loaded image.
    pub descriptor_address: u64,
    /// The first instruction's address in the loaded image.
    pub entry: u64,
    /// The kernel's code size (its function symbol's size).
    pub code_size: u64,
    pub args: Vec<KernelArg>,
    pub kernarg_segment_size: u32,
    pub wavefront_size: u32,
    pub sgpr_count: u32,
    pub vgpr_count: u32,
    pub agpr_count: u32,
    pub max_flat_workgroup_size: u32,
}

impl KernelInfo {
    /// Workgroups of `threads` work-items with `dynamic_lds` bytes of LDS each that one compute
    /// unit of `arch` holds at once: by the waves its registers leave room for on each SIMD and
    /// by LDS. AMD's figures: CDNA3 4 SIMDs a compute unit, 512 registers a lane for VGPRs and
    /// AGPRs together (AGPRs from the next multiple of 4), allocated in blocks of 8, at most 8
    /// waves a SIMD; RDNA3 2 SIMDs a compute unit, 1536 VGPRs a lane in wave32, blocks of 24, at
    /// most 16 waves a SIMD; 64 KiB of LDS on both.
    pub fn workgroups_per_cu(&self, arch: Arch, threads: u32, dynamic_lds: u32) -> u32 {
        if threads == 0 || threads > self.max_flat_workgroup_size {
            return 0;
        }
        let (simds, lane_registers, block, waves_per_simd) = match arch {
            Arch::Gfx942 => (4, 512, 8, 8),
            Arch::Gfx1100 => (2, 1536, 24, 16),
        };
        let used = match arch {
            Arch::Gfx942 => self.vgpr_count.next_multiple_of(4) + self.agpr_count,
            Arch::Gfx1100 => self.vgpr_count,
        };
        let registers = used.max(1).next_multiple_of(block);
        let waves = (lane_registers / registers).min(waves_per_simd) * simds;
        let by_registers = waves / threads.div_ceil(self.wavefront_size.max(1));
        // a compute unit's LDS is a workgroup's most on both
        let lds = u64::from(self.descriptor.group_segment_fixed_size) + u64::from(dynamic_lds);
        let by_lds = crate::exec::WORKGROUP_LDS_BYTES
            .checked_div(lds)
            .map_or(u32::MAX, |n| u32::try_from(n).unwrap_or(u32::MAX));
        by_registers.min(by_lds)
    }

    /// The offset of a hidden argument (`block_count_x`, `group_size_x`, `dynamic_lds_size`...).
    pub fn hidden(&self, name: &str) -> Option<&KernelArg> {
        self.args
            .iter()
            .find(|a| matches!(&a.kind, ArgKind::Hidden(h) if h == name))
    }
}

/// A loaded code object: its architecture, its image at load addresses and its kernels.
#[derive(Debug, Clone)]
pub struct CodeObject {
    pub arch: Arch,
    /// The metadata's target triple (`amdgcn-amd-amdhsa--gfx1100`).
    pub target: String,
    /// The loadable sections at their addresses.
    pub image: Vec<u8>,
    /// Where `.text` starts and ends in the image.
    pub text: (u64, u64),
    pub kernels: Vec<KernelInfo>,
}

fn meta_u32(kernel: &Value, key: &str, name: &str) -> Result<u32> {
    kernel
        .get(key)
        .and_then(Value::as_u64)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| Error::Metadata(format!("kernel {name}: no integer {key}")))
}

impl CodeObject {
    pub fn parse(data: &[u8]) -> Result<Self> {
        let elf = Elf::parse(data)?;
        if elf.machine != EM_AMDGPU {
            return Err(Error::Malformed(format!(
                "e_machine {} is not AMDGPU ({EM_AMDGPU})",
                elf.machine
            )));
        }
        let note = elf
            .notes()?
            .into_iter()
            .find(|n| n.name == "AMDGPU" && n.kind == NT_AMDGPU_METADATA)
            .ok_or_else(|| Error::Metadata("no NT_AMDGPU_METADATA note".into()))?;
        let meta = msgpack::decode(&note.desc)?;
        let target = meta
            .get("amdhsa.target")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::Metadata("no amdhsa.target".into()))?
            .to_string();
        let arch = Arch::from_target(&target)?;
        let image = elf.load_image()?;
        let text = elf
            .sections
            .iter()
            .find(|s| s.name == ".text")
            .map(|s| (s.addr, s.addr + s.size))
            .ok_or_else(|| Error::Malformed("no .text section".into()))?;
        let symbols = elf.symbols()?;
        let described = meta
            .get("amdhsa.kernels")
            .and_then(Value::as_array)
            .ok_or_else(|| Error::Metadata("no amdhsa.kernels".into()))?;
        let mut kernels = Vec::with_capacity(described.len());
        for k in described {
            let name = k
                .get(".name")
                .and_then(Value::as_str)
                .ok_or_else(|| Error::Metadata("a kernel without .name".into()))?
                .to_string();
            let symbol = k.get(".symbol").and_then(Value::as_str).unwrap_or("");
            let kd = symbols
                .iter()
                .find(|s| s.name == symbol)
                .ok_or_else(|| Error::Malformed(format!("kernel {name}: no symbol {symbol}")))?;
            let bytes = image.bytes_at(kd.value as usize, 64)?;
            let descriptor = KernelDescriptor::parse(bytes)?;
            let entry = kd
                .value
                .checked_add_signed(descriptor.kernel_code_entry_byte_offset)
                .ok_or_else(|| Error::Malformed(format!("kernel {name}: entry overflows")))?;
            let code_size = symbols
                .iter()
                .find(|s| s.name == name && s.kind == 2)
                .map_or(0, |s| s.size);
            let mut args = Vec::new();
            for a in k.get(".args").and_then(Value::as_array).unwrap_or(&[]) {
                let kind = a
                    .get(".value_kind")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        Error::Metadata(format!("kernel {name}: an argument without .value_kind"))
                    })?;
                args.push(KernelArg {
                    offset: meta_u32(a, ".offset", &name)?,
                    size: meta_u32(a, ".size", &name)?,
                    kind: ArgKind::from_name(kind),
                });
            }
            kernels.push(KernelInfo {
                descriptor,
                descriptor_address: kd.value,
                entry,
                code_size,
                args,
                kernarg_segment_size: meta_u32(k, ".kernarg_segment_size", &name)?,
                wavefront_size: meta_u32(k, ".wavefront_size", &name)?,
                sgpr_count: meta_u32(k, ".sgpr_count", &name)?,
                vgpr_count: meta_u32(k, ".vgpr_count", &name)?,
                agpr_count: k.get(".agpr_count").and_then(Value::as_u64).unwrap_or(0) as u32,
                max_flat_workgroup_size: meta_u32(k, ".max_flat_workgroup_size", &name)?,
                name,
            });
        }
        Ok(CodeObject {
            arch,
            target,
            image,
            text,
            kernels,
        })
    }

    pub fn kernel(&self, name: &str) -> Option<&KernelInfo> {
        self.kernels.iter().find(|k| k.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_fields_sit_where_amdgpu_usage_puts_them() {
        let mut kd = [0u8; 64];
        kd[0..4].copy_from_slice(&256u32.to_le_bytes());
        kd[8..12].copy_from_slice(&280u32.to_le_bytes());
        kd[16..24].copy_from_slice(&(-0x1000i64).to_le_bytes());
        // rsrc2: USER_SGPR_COUNT 6, workgroup id x and y, work-item ids x, y
        let rsrc2: u32 = (6 << 1) | (1 << 7) | (1 << 8) | (1 << 11);
        kd[52..56].copy_from_slice(&rsrc2.to_le_bytes());
        // dispatch ptr + kernarg ptr, wave32
        kd[56..58].copy_from_slice(&((1u16 << 1) | (1 << 3) | (1 << 10)).to_le_bytes());
        let d = KernelDescriptor::parse(&kd).unwrap();
        assert_eq!(d.group_segment_fixed_size, 256);
        assert_eq!(d.kernarg_size, 280);
        assert_eq!(d.kernel_code_entry_byte_offset, -0x1000);
        assert_eq!(
            d.user_sgprs(),
            [UserSgpr::DispatchPtr, UserSgpr::KernargSegmentPtr]
        );
        assert_eq!(d.user_sgpr_count(), 6);
        assert_eq!(d.workgroup_ids(), [true, true, false]);
        assert_eq!(d.workitem_id_dims(), 2);
        assert!(d.wave32());
        assert!(KernelDescriptor::parse(&kd[..63]).is_err());
    }

    #[test]
    fn targets_name_their_arch() {
        assert_eq!(
            Arch::from_target("amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-").unwrap(),
            Arch::Gfx942
        );
        assert_eq!(
            Arch::from_target("amdgcn-amd-amdhsa--gfx1100").unwrap(),
            Arch::Gfx1100
        );
        assert!(matches!(
            Arch::from_target("amdgcn-amd-amdhsa--gfx90a"),
            Err(Error::UnsupportedArch(a)) if a == "gfx90a"
        ));
    }

    #[test]
    fn occupancy_follows_registers_and_lds() {
        let mut kd = [0u8; 64];
        kd[0..4].copy_from_slice(&(16u32 << 10).to_le_bytes());
        let kernel = |wavefront_size, vgpr_count, agpr_count| KernelInfo {
            name: "k".into(),
            descriptor: KernelDescriptor::parse(&kd).unwrap(),
            descriptor_address: 0,
            entry: 0,
            code_size: 0,
            args: Vec::new(),
            kernarg_segment_size: 0,
            wavefront_size,
            sgpr_count: 0,
            vgpr_count,
            agpr_count,
            max_flat_workgroup_size: 256,
        };
        // gfx942, 4 waves a workgroup: 128 VGPRs leave 4 waves a SIMD, 4 workgroups; AGPRs
        // count after the VGPRs (130 -> 132 + 8 = 140 -> 144 registers: 3 waves a SIMD)
        assert_eq!(
            kernel(64, 128, 0).workgroups_per_cu(Arch::Gfx942, 256, 0),
            4
        );
        assert_eq!(
            kernel(64, 130, 8).workgroups_per_cu(Arch::Gfx942, 256, 0),
            3
        );
        // few registers: 8 waves a SIMD at most; LDS: 16 KiB static + 16 KiB dynamic, 2
        assert_eq!(kernel(64, 16, 0).workgroups_per_cu(Arch::Gfx942, 256, 0), 4);
        assert_eq!(
            kernel(64, 16, 0).workgroups_per_cu(Arch::Gfx942, 256, 16 << 10),
            2
        );
        // gfx1100 wave32, 4 waves a workgroup over 2 SIMDs: 120 VGPRs leave 12 waves a SIMD,
        // 6 workgroups, but the 16 KiB of LDS 4; 250 VGPRs (264 allocated) 5 waves a SIMD, 2
        assert_eq!(
            kernel(32, 120, 0).workgroups_per_cu(Arch::Gfx1100, 128, 0),
            4
        );
        assert_eq!(
            kernel(32, 250, 0).workgroups_per_cu(Arch::Gfx1100, 128, 0),
            2
        );
        // more threads than the kernel was built for: none
        assert_eq!(kernel(64, 16, 0).workgroups_per_cu(Arch::Gfx942, 512, 0), 0);
    }

    #[test]
    fn not_a_code_object_is_an_error() {
        assert!(CodeObject::parse(b"not an elf").is_err());
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[4] = 2;
        elf[5] = 1;
        assert!(CodeObject::parse(&elf).is_err());
    }
}
