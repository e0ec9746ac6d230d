//! The parts of ELF64 (little-endian) a code object needs: sections, symbols, notes, and the
//! image its loadable sections make at their addresses.

use crate::{Error, Result};

/// `e_machine` of AMDGPU code objects.
pub const EM_AMDGPU: u16 = 224;
const SHT_SYMTAB: u32 = 2;
const SHT_NOTE: u32 = 7;
const SHT_NOBITS: u32 = 8;
const SHT_DYNSYM: u32 = 11;
const SHF_ALLOC: u64 = 2;

fn malformed(what: impl Into<String>) -> Error {
    Error::Malformed(what.into())
}

/// Little-endian reads that fail with an error instead of panicking.
pub(crate) trait ReadLe {
    fn bytes_at(&self, at: usize, n: usize) -> Result<&[u8]>;
    fn u16_at(&self, at: usize) -> Result<u16> {
        let b = self.bytes_at(at, 2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32_at(&self, at: usize) -> Result<u32> {
        let b = self.bytes_at(at, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64_at(&self, at: usize) -> Result<u64> {
        let b = self.bytes_at(at, 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}

impl ReadLe for [u8] {
    fn bytes_at(&self, at: usize, n: usize) -> Result<&[u8]> {
        at.checked_add(n)
            .and_then(|end| self.get(at..end))
            .ok_or_else(|| {
                malformed(format!(
                    "{n} bytes at {at:#x} past its end ({:#x})",
                    self.len()
                ))
            })
    }
}

/// A section header.
#[derive(Debug, Clone)]
pub struct Section {
    pub name: String,
    pub kind: u32,
    pub flags: u64,
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
    pub link: u32,
}

/// A symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Symbol {
    pub name: String,
    pub value: u64,
    pub size: u64,
    /// `STT_*` (low nibble of `st_info`).
    pub kind: u8,
    /// `STB_*` (high nibble of `st_info`).
    pub binding: u8,
}

/// A note: (owner name, type, descriptor).
#[derive(Debug, Clone)]
pub struct Note {
    pub name: String,
    pub kind: u32,
    pub desc: Vec<u8>,
}

/// An ELF64 little-endian file, read.
#[derive(Debug, Clone)]
pub struct Elf<'a> {
    pub data: &'a [u8],
    pub machine: u16,
    pub flags: u32,
    pub sections: Vec<Section>,
}

fn c_string(table: &[u8], at: usize) -> Result<String> {
    let rest = table
        .get(at..)
        .ok_or_else(|| malformed(format!("string at {at} past its table")))?;
    let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
    Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
}

impl<'a> Elf<'a> {
    pub fn parse(data: &'a [u8]) -> Result<Self> {
        if data.len() < 64 || &data[..4] != b"\x7fELF" {
            return Err(malformed("not an ELF file"));
        }
        if data[4] != 2 || data[5] != 1 {
            return Err(malformed("not 64-bit little-endian"));
        }
        let machine = data.u16_at(0x12)?;
        let flags = data.u32_at(0x30)?;
        let shoff = data.u64_at(0x28)? as usize;
        let shentsize = data.u16_at(0x3a)? as usize;
        let shnum = data.u16_at(0x3c)? as usize;
        let shstrndx = data.u16_at(0x3e)? as usize;
        if shentsize < 64 {
            return Err(malformed("section headers shorter than 64 bytes"));
        }
        let mut raw = Vec::with_capacity(shnum);
        for i in 0..shnum {
            let at = shoff + i * shentsize;
            raw.push((
                data.u32_at(at)?,
                Section {
                    name: String::new(),
                    kind: data.u32_at(at + 4)?,
                    flags: data.u64_at(at + 8)?,
                    addr: data.u64_at(at + 16)?,
                    offset: data.u64_at(at + 24)?,
                    size: data.u64_at(at + 32)?,
                    link: data.u32_at(at + 40)?,
                },
            ));
        }
        let names = match raw.get(shstrndx) {
            Some((_, s)) if s.kind != SHT_NOBITS => {
                data.bytes_at(s.offset as usize, s.size as usize)?.to_vec()
            }
            _ => Vec::new(),
        };
        let sections = raw
            .into_iter()
            .map(|(name, mut s)| {
                s.name = c_string(&names, name as usize).unwrap_or_default();
                s
            })
            .collect();
        Ok(Elf {
            data,
            machine,
            flags,
            sections,
        })
    }

    /// A section's bytes in the file (empty for `SHT_NOBITS`).
    pub fn section_data(&self, s: &Section) -> Result<&'a [u8]> {
        if s.kind == SHT_NOBITS {
            return Ok(&[]);
        }
        self.data.bytes_at(s.offset as usize, s.size as usize)
    }

    /// The symbols of the static and dynamic symbol tables.
    pub fn symbols(&self) -> Result<Vec<Symbol>> {
        let mut out = Vec::new();
        for s in &self.sections {
            if s.kind != SHT_SYMTAB && s.kind != SHT_DYNSYM {
                continue;
            }
            let strings = self
                .sections
                .get(s.link as usize)
                .ok_or_else(|| malformed(format!("symbol table {} links no strings", s.name)))?;
            let strings = self.section_data(strings)?;
            let table = self.section_data(s)?;
            for entry in table.chunks_exact(24) {
                let name = entry.u32_at(0)? as usize;
                let info = entry[4];
                out.push(Symbol {
                    name: c_string(strings, name)?,
                    value: entry.u64_at(8)?,
                    size: entry.u64_at(16)?,
                    kind: info & 0xf,
                    binding: info >> 4,
                });
            }
        }
        Ok(out)
    }

    /// The notes of every note section.
    pub fn notes(&self) -> Result<Vec<Note>> {
        let mut out = Vec::new();
        let align4 = |n: usize| (n + 3) & !3;
        for s in self.sections.iter().filter(|s| s.kind == SHT_NOTE) {
            let data = self.section_data(s)?;
            let mut at = 0;
            while at + 12 <= data.len() {
                let namesz = data.u32_at(at)? as usize;
                let descsz = data.u32_at(at + 4)? as usize;
                let kind = data.u32_at(at + 8)?;
                let name = data.bytes_at(at + 12, namesz)?;
                let name_end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
                let desc_at = at + 12 + align4(namesz);
                let desc = data.bytes_at(desc_at, descsz)?.to_vec();
                out.push(Note {
                    name: String::from_utf8_lossy(&name[..name_end]).into_owned(),
                    kind,
                    desc,
                });
                at = desc_at + align4(descsz);
            }
        }
        Ok(out)
    }

    /// The loadable sections laid out at their addresses (zeros where none is, and for
    /// `SHT_NOBITS`): what a loader maps, indexed by virtual address.
    pub fn load_image(&self) -> Result<Vec<u8>> {
        let loaded = self.sections.iter().filter(|s| s.flags & SHF_ALLOC != 0);
        let end = loaded
            .clone()
            .map(|s| s.addr.saturating_add(s.size))
            .max()
            .unwrap_or(0);
        if end > 1 << 30 {
            return Err(malformed(format!("a loaded image of {end} bytes")));
        }
        let mut image = vec![0u8; end as usize];
        for s in loaded {
            let bytes = self.section_data(s)?;
            image[s.addr as usize..s.addr as usize + bytes.len()].copy_from_slice(bytes);
        }
        Ok(image)
    }
}
