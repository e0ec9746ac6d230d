//! A MessagePack reader: the format of the code object's metadata note
//! (`NT_AMDGPU_METADATA`).

use crate::{Error, Result};

/// A decoded MessagePack value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Nil,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Bin(Vec<u8>),
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
    Ext(i8, Vec<u8>),
}

impl Value {
    /// The value of `key` in a map with string keys.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(entries) => entries
                .iter()
                .find(|(k, _)| matches!(k, Value::Str(s) if s == key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::Int(i) => u64::try_from(i).ok(),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

fn bad(what: impl Into<String>) -> Error {
    Error::Metadata(what.into())
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.data.len())
            .ok_or_else(|| bad(format!("{n} bytes at {} past the end", self.at)))?;
        let out = &self.data[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn uint(&mut self, n: usize) -> Result<u64> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |v, &b| (v << 8) | u64::from(b)))
    }

    fn len(&mut self, n: usize) -> Result<usize> {
        usize::try_from(self.uint(n)?).map_err(|_| bad("a length past usize"))
    }

    fn string(&mut self, n: usize) -> Result<Value> {
        let bytes = self.take(n)?;
        String::from_utf8(bytes.to_vec())
            .map(Value::Str)
            .map_err(|_| bad("a string that is not UTF-8"))
    }

    fn array(&mut self, n: usize, depth: usize) -> Result<Value> {
        (0..n)
            .map(|_| self.value(depth + 1))
            .collect::<Result<_>>()
            .map(Value::Array)
    }

    fn map(&mut self, n: usize, depth: usize) -> Result<Value> {
        (0..n)
            .map(|_| Ok((self.value(depth + 1)?, self.value(depth + 1)?)))
            .collect::<Result<_>>()
            .map(Value::Map)
    }

    fn ext(&mut self, n: usize) -> Result<Value> {
        let kind = self.take(1)?[0] as i8;
        Ok(Value::Ext(kind, self.take(n)?.to_vec()))
    }

    fn value(&mut self, depth: usize) -> Result<Value> {
        if depth > 64 {
            return Err(bad("nested more than 64 deep"));
        }
        let tag = self.take(1)?[0];
        Ok(match tag {
            0x00..=0x7f => Value::Int(i128::from(tag)),
            0x80..=0x8f => return self.map(usize::from(tag & 0x0f), depth),
            0x90..=0x9f => return self.array(usize::from(tag & 0x0f), depth),
            0xa0..=0xbf => return self.string(usize::from(tag & 0x1f)),
            0xc0 => Value::Nil,
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4..=0xc6 => {
                let n = self.len(1 << (tag - 0xc4))?;
                Value::Bin(self.take(n)?.to_vec())
            }
            0xc7..=0xc9 => {
                let n = self.len(1 << (tag - 0xc7))?;
                return self.ext(n);
            }
            0xca => Value::Float(f64::from(f32::from_bits(self.uint(4)? as u32))),
            0xcb => Value::Float(f64::from_bits(self.uint(8)?)),
            0xcc..=0xcf => Value::Int(i128::from(self.uint(1 << (tag - 0xcc))?)),
            0xd0..=0xd3 => {
                let n = 1usize << (tag - 0xd0);
                let raw = self.uint(n)?;
                let shift = 64 - 8 * n as u32;
                Value::Int(i128::from(((raw << shift) as i64) >> shift))
            }
            0xd4..=0xd8 => return self.ext(1 << (tag - 0xd4)),
            0xd9..=0xdb => {
                let n = self.len(1 << (tag - 0xd9))?;
                return self.string(n);
            }
            0xdc | 0xdd => {
                let n = self.len(2 << (tag - 0xdc))?;
                return self.array(n, depth);
            }
            0xde | 0xdf => {
                let n = self.len(2 << (tag - 0xde))?;
                return self.map(n, depth);
            }
            0xe0..=0xff => Value::Int(i128::from(tag as i8)),
            0xc1 => return Err(bad("the reserved byte 0xc1")),
        })
    }
}

/// The one value `data` holds.
pub fn decode(data: &[u8]) -> Result<Value> {
    let mut r = Reader { data, at: 0 };
    r.value(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_value() {
        // {"a": [1, -1, 300, -300, "xy", true, nil, 1.5f32], "b": bin8 [9]}
        let data = [
            0x82, 0xa1, b'a', 0x98, 0x01, 0xff, 0xcd, 0x01, 0x2c, 0xd1, 0xfe, 0xd4, 0xa2, b'x',
            b'y', 0xc3, 0xc0, 0xca, 0x3f, 0xc0, 0x00, 0x00, 0xa1, b'b', 0xc4, 0x01, 0x09,
        ];
        let v = decode(&data).unwrap();
        assert_eq!(
            v.get("a").unwrap().as_array().unwrap(),
            &[
                Value::Int(1),
                Value::Int(-1),
                Value::Int(300),
                Value::Int(-300),
                Value::Str("xy".into()),
                Value::Bool(true),
                Value::Nil,
                Value::Float(1.5),
            ]
        );
        assert_eq!(v.get("b"), Some(&Value::Bin(vec![9])));
    }

    #[test]
    fn truncated_and_reserved_input_are_errors() {
        assert!(decode(&[0x92, 0x01]).is_err());
        assert!(decode(&[0xc1]).is_err());
        assert!(decode(&[0xd9, 0x05, b'a']).is_err());
        let deep = vec![0x91; 100];
        assert!(decode(&deep).is_err());
    }
}
