//! How the ranks of a communicator learn its unique id: rank 0 makes it and publishes it, the
//! others fetch it. Over TCP (`tcp:host:port`: rank 0 listens, across machines) or a file
//! (`file:/path`: one host, a shared folder). Both wait for every rank, so a rank that never
//! comes is a timeout error rather than a hang in the library's init.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::library::{abi, UniqueId};

/// Where the id is published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rendezvous {
    /// `host:port` rank 0 listens on and the others connect to.
    Tcp(String),
    /// A file rank 0 writes (atomically) and the others read; it must not exist before the
    /// ranks start (the launcher removes it).
    File(PathBuf),
}

impl FromStr for Rendezvous {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.split_once(':') {
            Some(("tcp", addr)) if addr.contains(':') => Ok(Rendezvous::Tcp(addr.to_string())),
            Some(("file", path)) if !path.is_empty() => Ok(Rendezvous::File(PathBuf::from(path))),
            _ => Err(Error::Rendezvous {
                how: s.to_string(),
                detail: "expected tcp:<host>:<port> or file:<path>".into(),
            }),
        }
    }
}

impl std::fmt::Display for Rendezvous {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rendezvous::Tcp(a) => write!(f, "tcp:{a}"),
            Rendezvous::File(p) => write!(f, "file:{}", p.display()),
        }
    }
}

/// Greeting of a rank to rank 0: magic, rank, size.
const MAGIC: &[u8; 8] = b"CRCCL\x01\0\0";
const HELLO: usize = 16;
const FILE_LEN: usize = 8 + 4 + abi::UNIQUE_ID_BYTES;

impl Rendezvous {
    fn error(&self, detail: impl Into<String>) -> Error {
        Error::Rendezvous {
            how: self.to_string(),
            detail: detail.into(),
        }
    }

    /// The id of the communicator: rank 0 calls `make_id` and publishes the result; every
    /// rank returns it once all `size` ranks have arrived (rank 0, over TCP) or the id is
    /// there (file), within `timeout`.
    pub fn exchange(
        &self,
        rank: usize,
        size: usize,
        timeout: Duration,
        make_id: impl FnOnce() -> Result<UniqueId>,
    ) -> Result<UniqueId> {
        if size == 0 || rank >= size || size > u32::MAX as usize {
            return Err(self.error(format!("rank {rank} of {size}")));
        }
        let deadline = Instant::now() + timeout;
        match self {
            Rendezvous::Tcp(addr) => {
                if rank == 0 {
                    // Listen first, so that the others' connections queue while the id is made.
                    let listener = TcpListener::bind(addr.as_str())
                        .map_err(|e| self.error(format!("listening on {addr}: {e}")))?;
                    let id = make_id()?;
                    self.serve(&listener, id, size, deadline)?;
                    Ok(id)
                } else {
                    self.fetch(addr, rank, size, deadline)
                }
            }
            Rendezvous::File(path) => {
                if rank == 0 {
                    let id = make_id()?;
                    let mut bytes = Vec::with_capacity(FILE_LEN);
                    bytes.extend_from_slice(MAGIC);
                    bytes.extend_from_slice(&(size as u32).to_le_bytes());
                    bytes.extend_from_slice(&id.0);
                    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
                    std::fs::write(&tmp, &bytes)
                        .and_then(|()| std::fs::rename(&tmp, path))
                        .map_err(|e| self.error(format!("writing {}: {e}", path.display())))?;
                    Ok(id)
                } else {
                    loop {
                        match std::fs::read(path) {
                            Ok(b) if b.len() == FILE_LEN && &b[..8] == MAGIC => {
                                let n = u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize;
                                if n != size {
                                    return Err(self.error(format!(
                                        "the file is for {n} ranks, this rank expects {size}"
                                    )));
                                }
                                let mut id = [0u8; abi::UNIQUE_ID_BYTES];
                                id.copy_from_slice(&b[12..]);
                                return Ok(UniqueId(id));
                            }
                            Ok(b)
                                if b.len() == FILE_LEN
                                    || !b.is_empty()
                                        && b[..b.len().min(8)] != MAGIC[..b.len().min(8)] =>
                            {
                                return Err(self.error("the file is not a rendezvous file"));
                            }
                            _ if Instant::now() > deadline => {
                                return Err(self.error(format!(
                                    "rank {rank}: no id from rank 0 within {:.0} s",
                                    timeout.as_secs_f64()
                                )))
                            }
                            _ => std::thread::sleep(Duration::from_millis(20)),
                        }
                    }
                }
            }
        }
    }

    /// Rank 0: takes a greeting from each other rank, then sends every one the id.
    fn serve(
        &self,
        listener: &TcpListener,
        id: UniqueId,
        size: usize,
        deadline: Instant,
    ) -> Result<()> {
        listener
            .set_nonblocking(true)
            .map_err(|e| self.error(e.to_string()))?;
        let mut peers: Vec<Option<TcpStream>> = (0..size).map(|_| None).collect();
        let mut arrived = 1;
        while arrived < size {
            match listener.accept() {
                Ok((mut stream, from)) => {
                    let hello = (|| -> std::io::Result<[u8; HELLO]> {
                        stream.set_nonblocking(false)?;
                        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
                        let mut hello = [0u8; HELLO];
                        stream.read_exact(&mut hello)?;
                        Ok(hello)
                    })();
                    let Ok(hello) = hello else {
                        continue; // not one of ours, or gone: keep waiting for the ranks
                    };
                    let word = |i: usize| {
                        u32::from_le_bytes([hello[i], hello[i + 1], hello[i + 2], hello[i + 3]])
                            as usize
                    };
                    if &hello[..8] != MAGIC {
                        continue;
                    }
                    let (r, n) = (word(8), word(12));
                    if n != size || r == 0 || r >= size {
                        return Err(self.error(format!(
                            "{from} says rank {r} of {n}; this group has {size} ranks"
                        )));
                    }
                    if peers[r].is_some() {
                        return Err(
                            self.error(format!("rank {r} arrived twice (again from {from})"))
                        );
                    }
                    peers[r] = Some(stream);
                    arrived += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if Instant::now() > deadline {
                        let missing: Vec<usize> =
                            (1..size).filter(|&r| peers[r].is_none()).collect();
                        return Err(self.error(format!("ranks {missing:?} did not arrive in time")));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(self.error(format!("accepting: {e}"))),
            }
        }
        for (r, peer) in peers.iter_mut().enumerate().skip(1) {
            if let Some(stream) = peer {
                stream
                    .write_all(&id.0)
                    .map_err(|e| self.error(format!("sending the id to rank {r}: {e}")))?;
            }
        }
        Ok(())
    }

    /// Ranks 1..: connects (retrying until rank 0 listens), greets, receives the id.
    fn fetch(&self, addr: &str, rank: usize, size: usize, deadline: Instant) -> Result<UniqueId> {
        let mut stream = loop {
            let attempt = addr
                .to_socket_addrs()
                .map_err(|e| self.error(format!("resolving {addr}: {e}")))?
                .find_map(|a| TcpStream::connect_timeout(&a, Duration::from_secs(1)).ok());
            match attempt {
                Some(s) => break s,
                None if Instant::now() > deadline => {
                    return Err(self.error(format!("rank {rank}: rank 0 never listened on {addr}")))
                }
                None => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let mut hello = [0u8; HELLO];
        hello[..8].copy_from_slice(MAGIC);
        hello[8..12].copy_from_slice(&(rank as u32).to_le_bytes());
        hello[12..].copy_from_slice(&(size as u32).to_le_bytes());
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(100));
        let mut id = [0u8; abi::UNIQUE_ID_BYTES];
        stream
            .set_read_timeout(Some(left))
            .and_then(|()| stream.write_all(&hello))
            .and_then(|()| stream.read_exact(&mut id))
            .map_err(|e| self.error(format!("rank {rank}: no id from rank 0: {e}")))?;
        Ok(UniqueId(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(seed: u8) -> UniqueId {
        UniqueId([seed; abi::UNIQUE_ID_BYTES])
    }

    fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap_or(29511)
    }

    #[test]
    fn addresses_parse() {
        assert_eq!(
            "tcp:10.0.0.1:29500".parse::<Rendezvous>().ok(),
            Some(Rendezvous::Tcp("10.0.0.1:29500".into()))
        );
        assert_eq!(
            "file:/tmp/x".parse::<Rendezvous>().ok(),
            Some(Rendezvous::File("/tmp/x".into()))
        );
        for bad in ["tcp:nohost", "file:", "udp:1:2", "x"] {
            let err = bad.parse::<Rendezvous>().unwrap_err().to_string();
            assert!(err.contains("tcp:<host>:<port>"), "{bad}: {err}");
        }
    }

    #[test]
    fn four_ranks_get_rank_zeros_id_over_tcp() {
        let r = Rendezvous::Tcp(format!("127.0.0.1:{}", free_port()));
        let ids: Vec<UniqueId> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|rank| {
                    let r = r.clone();
                    s.spawn(move || r.exchange(rank, 4, Duration::from_secs(20), || Ok(id(42))))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap().unwrap())
                .collect()
        });
        assert!(ids.iter().all(|i| *i == id(42)));
    }

    #[test]
    fn a_missing_rank_is_a_timeout_error_on_every_side() {
        let r = Rendezvous::Tcp(format!("127.0.0.1:{}", free_port()));
        let err = r
            .exchange(0, 3, Duration::from_millis(300), || Ok(id(1)))
            .unwrap_err()
            .to_string();
        assert!(err.contains("ranks [1, 2] did not arrive"), "{err}");
        let nobody = Rendezvous::Tcp(format!("127.0.0.1:{}", free_port()));
        let err = nobody
            .exchange(1, 2, Duration::from_millis(300), || Ok(id(1)))
            .unwrap_err()
            .to_string();
        assert!(err.contains("never listened"), "{err}");
    }

    #[test]
    fn a_rank_of_another_group_is_refused() {
        let r = Rendezvous::Tcp(format!("127.0.0.1:{}", free_port()));
        let errs: Vec<String> = std::thread::scope(|s| {
            let r0 = r.clone();
            let zero = s.spawn(move || r0.exchange(0, 2, Duration::from_secs(5), || Ok(id(3))));
            let r1 = r.clone();
            let one = s.spawn(move || r1.exchange(1, 3, Duration::from_secs(5), || Ok(id(3))));
            [zero.join().unwrap(), one.join().unwrap()]
                .into_iter()
                .filter_map(|x| x.err().map(|e| e.to_string()))
                .collect()
        });
        assert!(errs.iter().any(|e| e.contains("rank 1 of 3")), "{errs:?}");
    }

    #[test]
    fn the_file_rendezvous_hands_over_the_id_and_checks_the_group_size() {
        let dir = std::env::temp_dir().join(format!("rocm-ccl-rdv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("id");
        let _ = std::fs::remove_file(&path);
        let r = Rendezvous::File(path.clone());
        let got = std::thread::scope(|s| {
            let reader = s.spawn(|| r.exchange(1, 2, Duration::from_secs(10), || Ok(id(0))));
            std::thread::sleep(Duration::from_millis(50));
            r.exchange(0, 2, Duration::from_secs(10), || Ok(id(9)))
                .unwrap();
            reader.join().unwrap().unwrap()
        });
        assert_eq!(got, id(9));
        let err = r
            .exchange(1, 4, Duration::from_secs(1), || Ok(id(0)))
            .unwrap_err()
            .to_string();
        assert!(err.contains("for 2 ranks"), "{err}");
        std::fs::remove_file(&path).unwrap();
        let err = r
            .exchange(1, 2, Duration::from_millis(100), || Ok(id(0)))
            .unwrap_err()
            .to_string();
        assert!(err.contains("no id from rank 0"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
