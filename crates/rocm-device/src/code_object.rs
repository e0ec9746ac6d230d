//! Reading compiled code objects (hiprtc's AMDGPU ELF, NVRTC's cubin): the kernel symbols
//! they define, so the compile tiers can hold a module's exports against the kernel table.

use crate::error::{Error, Result};

const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
const STB_GLOBAL: u8 = 1;
const STT_FUNC: u8 = 2;

fn bad(what: &str) -> Error {
    Error::InvalidLayout(format!("code object: {what}"))
}

fn read<const N: usize>(image: &[u8], at: usize) -> Result<[u8; N]> {
    image
        .get(at..at.checked_add(N).ok_or_else(|| bad("offset overflows"))?)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| bad("truncated"))
}
fn u16_at(image: &[u8], at: usize) -> Result<usize> {
    Ok(u16::from_le_bytes(read(image, at)?) as usize)
}
fn u32_at(image: &[u8], at: usize) -> Result<u32> {
    Ok(u32::from_le_bytes(read(image, at)?))
}
fn u64_at(image: &[u8], at: usize) -> Result<usize> {
    usize::try_from(u64::from_le_bytes(read(image, at)?)).map_err(|_| bad("offset overflows"))
}

/// The names of the global function symbols of a 64-bit little-endian ELF image: the kernel
/// entry points of a hiprtc code object or an NVRTC cubin, sorted and deduplicated.
pub fn kernel_symbols(image: &[u8]) -> Result<Vec<String>> {
    if !image.starts_with(b"\x7fELF") || image.get(4) != Some(&2) || image.get(5) != Some(&1) {
        return Err(bad("not a 64-bit little-endian ELF image"));
    }
    let shoff = u64_at(image, 0x28)?;
    let shentsize = u16_at(image, 0x3a)?;
    let shnum = u16_at(image, 0x3c)?;
    if shentsize < 64 {
        return Err(bad("section headers too small"));
    }
    let section = |i: usize| -> Result<(u32, usize, usize, usize)> {
        let at = shoff + i * shentsize;
        Ok((
            u32_at(image, at + 4)?,           // sh_type
            u64_at(image, at + 24)?,          // sh_offset
            u64_at(image, at + 32)?,          // sh_size
            u32_at(image, at + 40)? as usize, // sh_link
        ))
    };
    let mut names = Vec::new();
    for i in 0..shnum {
        let (kind, offset, size, link) = section(i)?;
        if kind != SHT_SYMTAB && kind != SHT_DYNSYM {
            continue;
        }
        let (_, str_off, str_size, _) = section(link)?;
        let strings = image
            .get(str_off..str_off + str_size)
            .ok_or_else(|| bad("string table out of the image"))?;
        for sym in (offset..offset + size).step_by(24) {
            let info = read::<1>(image, sym + 4)?[0];
            if info >> 4 != STB_GLOBAL || info & 0xf != STT_FUNC {
                continue;
            }
            let name_at = u32_at(image, sym)? as usize;
            let tail = strings
                .get(name_at..)
                .ok_or_else(|| bad("symbol name out of its table"))?;
            let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
            names.push(String::from_utf8_lossy(&tail[..end]).into_owned());
        }
    }
    names.sort_unstable();
    names.dedup();
    Ok(names)
}

/// The entries of the table that the image lacks, and the image's kernels that the table does
/// not list.
pub fn compare_with_table(
    module: &crate::kernel::KernelModule,
    image: &[u8],
) -> Result<(Vec<String>, Vec<String>)> {
    let found = kernel_symbols(image)?;
    let mut listed: Vec<String> = module.entry_points().collect();
    listed.sort_unstable();
    let missing = listed
        .iter()
        .filter(|n| found.binary_search(n).is_err())
        .cloned()
        .collect();
    let unlisted = found
        .into_iter()
        .filter(|n| listed.binary_search(n).is_err())
        .collect();
    Ok((missing, unlisted))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 with one symbol table: `(name, info)` symbols.
    fn elf(symbols: &[(&str, u8)]) -> Vec<u8> {
        let mut strtab = vec![0u8];
        let mut symtab = vec![0u8; 24]; // the null symbol
        for (name, info) in symbols {
            let at = strtab.len() as u32;
            strtab.extend_from_slice(name.as_bytes());
            strtab.push(0);
            let mut s = [0u8; 24];
            s[..4].copy_from_slice(&at.to_le_bytes());
            s[4] = *info;
            symtab.extend_from_slice(&s);
        }
        let mut img = vec![0u8; 64];
        img[..4].copy_from_slice(b"\x7fELF");
        img[4] = 2;
        img[5] = 1;
        let sym_off = img.len();
        img.extend_from_slice(&symtab);
        let str_off = img.len();
        img.extend_from_slice(&strtab);
        let shoff = img.len();
        img[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        img[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        img[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        let header = |kind: u32, off: usize, size: usize, link: u32| {
            let mut h = [0u8; 64];
            h[4..8].copy_from_slice(&kind.to_le_bytes());
            h[24..32].copy_from_slice(&(off as u64).to_le_bytes());
            h[32..40].copy_from_slice(&(size as u64).to_le_bytes());
            h[40..44].copy_from_slice(&link.to_le_bytes());
            h
        };
        img.extend_from_slice(&[0u8; 64]);
        img.extend_from_slice(&header(SHT_SYMTAB, sym_off, symtab.len(), 2));
        img.extend_from_slice(&header(3, str_off, strtab.len(), 0));
        img
    }

    #[test]
    fn global_functions_are_listed_and_nothing_else() {
        let img = elf(&[
            ("fill_f32", 0x12),
            ("helper", 0x02),      // local function
            ("fill_f32.kd", 0x11), // global object (AMD kernel descriptor)
            ("copy_u8", 0x12),
            ("fill_f32", 0x12),
        ]);
        assert_eq!(kernel_symbols(&img).unwrap(), vec!["copy_u8", "fill_f32"]);
    }

    #[test]
    fn damaged_images_are_errors_not_panics() {
        assert!(kernel_symbols(b"not elf").is_err());
        let img = elf(&[("a", 0x12)]);
        for cut in [8, 40, 70, img.len() - 40] {
            assert!(kernel_symbols(&img[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn the_table_comparison_goes_both_ways() {
        let module = crate::kernel::KernelModule {
            name: "t",
            source: "",
            groups: &[crate::kernel::EntryGroup {
                ops: &["a", "b"],
                dtypes: &["f32"],
            }],
            params: &[],
            headers: &[],
        };
        let img = elf(&[("a_f32", 0x12), ("c_f32", 0x12)]);
        let (missing, unlisted) = compare_with_table(&module, &img).unwrap();
        assert_eq!(
            (missing, unlisted),
            (vec!["b_f32".into()], vec!["c_f32".into()])
        );
    }
}
