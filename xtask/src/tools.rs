//! Running commands and provisioning what the jobs need: cargo, pip into target/tools, test
//! binaries, stripping and packing. The other modules build on these; this one uses none of
//! them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::root;

/// Runs a command, echoing its output, and returns (success, stdout + stderr).
pub(crate) fn run_echo(cmd: &mut Command) -> Result<(bool, String), String> {
    let shown = format!("{cmd:?}");
    println!("$ {shown}");
    let out = cmd
        .stderr(Stdio::piped())
        .stdout(Stdio::piped())
        .output()
        .map_err(|e| format!("{shown}: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    print!("{text}");
    Ok((out.status.success(), text))
}

/// cargo, in the workspace root.
pub(crate) fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

/// The executables of one `cargo test --no-run` invocation, with their target names.
pub(crate) fn test_executables(args: &[&str]) -> Result<Vec<(String, PathBuf)>, String> {
    test_executables_of(cargo(), args)
}

/// [`test_executables`] for a `cargo` command of another workspace.
pub(crate) fn test_executables_of(
    mut cargo: Command,
    args: &[&str],
) -> Result<Vec<(String, PathBuf)>, String> {
    let out = cargo
        .args(["test", "--no-run", "--message-format=json"])
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err("building the test binaries failed".into());
    }
    let mut exes = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(exe) = json_str(line, "\"executable\":\"") else {
            continue;
        };
        // `cargo test` also builds examples; only test harnesses belong in the list.
        if line.contains("\"kind\":[\"example\"]") {
            continue;
        }
        let name = json_str(line, "\"name\":\"").unwrap_or_default();
        // the crate's directory name, so packed binaries say whose tests they are
        let package = json_str(line, "\"manifest_path\":\"")
            .and_then(|m| {
                PathBuf::from(m)
                    .parent()
                    .and_then(|d| d.file_name())
                    .map(|f| f.to_string_lossy().into_owned())
            })
            .unwrap_or_default();
        exes.push((format!("{package}/{name}"), PathBuf::from(exe)));
    }
    Ok(exes)
}

/// The string value following `key` in one line of cargo's JSON (paths hold no quotes).
pub(crate) fn json_str(line: &str, key: &str) -> Option<String> {
    let start = line.find(key)? + key.len();
    let end = line[start..].find('"')? + start;
    Some(line[start..end].to_string())
}

pub(crate) fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

pub(crate) fn tools_dir() -> PathBuf {
    root().join("target").join("tools")
}

/// `pip install --no-deps --upgrade --target <target> <wheels>`; returns whether pip succeeded.
pub(crate) fn pip_install_into(target: &Path, wheels: &[&str]) -> Result<bool, String> {
    pip_install(target, wheels, false)
}

/// `pip install --upgrade --target <target> <specs>`, their dependencies too where
/// `with_deps`; returns whether pip succeeded.
pub(crate) fn pip_install(target: &Path, specs: &[&str], with_deps: bool) -> Result<bool, String> {
    let python = ["python3", "python"]
        .into_iter()
        .find(|p| Command::new(p).arg("--version").output().is_ok())
        .ok_or("python3 is needed to install wheels from PyPI")?;
    let mut command = Command::new(python);
    command.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ]);
    if !with_deps {
        command.arg("--no-deps");
    }
    command
        .args(["--upgrade", "--target"])
        .arg(target)
        .args(specs);
    let (ok, _) = run_echo(&mut command)?;
    Ok(ok)
}

/// Downloads `spec` (`name==version`, a wheel, or an sdist with `--no-binary <name>` in
/// `extra`) from PyPI into target/tools/wheels, where pip leaves a file already there alone;
/// returns that folder.
pub(crate) fn pip_download(spec: &str, extra: &[&str]) -> Result<PathBuf, String> {
    let wheels = tools_dir().join("wheels");
    pip_download_into(&wheels, spec, extra, false)?;
    Ok(wheels)
}

/// `pip download` of `spec` into `dir` (`extra`: pip's options, e.g. another platform's wheels),
/// its dependencies too where `with_deps`.
pub(crate) fn pip_download_into(
    dir: &Path,
    spec: &str,
    extra: &[&str],
    with_deps: bool,
) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let mut command = Command::new("python3");
    command.args([
        "-m",
        "pip",
        "download",
        "--quiet",
        "--disable-pip-version-check",
    ]);
    if !with_deps {
        command.arg("--no-deps");
    }
    let status = command
        .args(extra)
        .arg("-d")
        .arg(dir)
        .arg(spec)
        .status()
        .map_err(|e| format!("python3 -m pip: {e}"))?;
    if !status.success() {
        return Err(format!(
            "pip could not download {spec} ({})",
            extra.join(" ")
        ));
    }
    Ok(())
}

pub(crate) fn with_ld_path(cmd: &mut Command, dir: &Path) {
    let old = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    cmd.env(
        "LD_LIBRARY_PATH",
        if old.is_empty() {
            dir.display().to_string()
        } else {
            format!("{}:{old}", dir.display())
        },
    );
}

/// Packs the folders `dirs` of `out` into `out/binaries.tar.xz` (all cores); whether tar
/// succeeded.
pub(crate) fn compress_binaries(out: &Path, dirs: &[&str]) -> Result<bool, String> {
    let (ok, _) = run_echo(
        Command::new("tar")
            // -9: a 64 MiB dictionary, so the test binaries share what they have in common
            .env("XZ_OPT", "-9")
            .arg("-cJf")
            .arg(out.join("binaries.tar.xz"))
            .arg("-C")
            .arg(out)
            .args(dirs),
    )?;
    Ok(ok)
}

/// The bytes of the files under `dir`; an error past 60 MiB, as the GPU machine takes at most
/// 64 MiB.
pub(crate) fn checked_pack_size(dir: &Path) -> Result<u64, String> {
    fn walk(dir: &Path) -> u64 {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| match e.metadata() {
                        Ok(m) if m.is_dir() => walk(&e.path()),
                        Ok(m) => m.len(),
                        Err(_) => 0,
                    })
                    .sum()
            })
            .unwrap_or(0)
    }
    let size = walk(dir);
    if size > 60 << 20 {
        return Err(format!(
            "{} holds {:.1} MiB; the GPU machine takes at most 64 MiB",
            dir.display(),
            size as f64 / 1048576.0
        ));
    }
    Ok(size)
}

pub(crate) fn strip(path: &Path) -> Result<(), String> {
    match Command::new("strip").arg(path).status() {
        Ok(s) if s.success() => Ok(()),
        _ => {
            println!(
                "note: strip unavailable, {} left unstripped",
                path.display()
            );
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_json_paths_are_extracted() {
        let line = r#"{"reason":"compiler-artifact","target":{"name":"gpu","kind":["test"]},"executable":"/x/target/debug/deps/gpu-1234"}"#;
        assert_eq!(
            json_str(line, "\"executable\":\"").as_deref(),
            Some("/x/target/debug/deps/gpu-1234")
        );
        assert_eq!(json_str(line, "\"name\":\"").as_deref(), Some("gpu"));
    }
}
