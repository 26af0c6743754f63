//! Records the git commit the binary is built from, for `mvproxy --version`: an inventory of a
//! staging cluster tells builds apart by it. `MVPROXY_GIT_COMMIT` set at build time wins (a
//! build from a source tarball or a container context without `.git`); otherwise
//! `git rev-parse HEAD` in this checkout; otherwise "unknown".

use std::process::Command;

const OVERRIDE: &str = "MVPROXY_GIT_COMMIT";

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(std::env::var_os("CARGO_MANIFEST_DIR")?)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-env-changed={OVERRIDE}");
    let commit = match std::env::var(OVERRIDE) {
        Ok(c) if !c.trim().is_empty() => c.trim().to_owned(),
        _ => {
            // Rebuilt when HEAD moves: HEAD itself (a checkout), the branch it points at (a
            // commit) and packed-refs (a gc). `--git-path` resolves them in a worktree too.
            // A path that does not exist would make cargo rerun this script on every build.
            let branch = git(&["symbolic-ref", "-q", "HEAD"]);
            for path in ["HEAD", "packed-refs"].into_iter().chain(branch.as_deref()) {
                if let Some(p) = git(&["rev-parse", "--git-path", path])
                    && std::path::Path::new(&p).exists()
                {
                    println!("cargo:rerun-if-changed={p}");
                }
            }
            git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".to_owned())
        }
    };
    println!("cargo:rustc-env={OVERRIDE}={commit}");
}
