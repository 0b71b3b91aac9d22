//! Records the commit the binary is built from as `VEIL_COMMIT`, for `veil_build_info` on /metrics: the
//! `VEIL_COMMIT` environment variable when set (a build from a source archive), else the repository's
//! `git rev-parse --short=12 HEAD`, else `unknown`. Cargo reruns this when HEAD or the branch it names moves.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=VEIL_COMMIT");
    let commit = std::env::var("VEIL_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    if let Some(git_dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={git_dir}/HEAD");
        println!("cargo:rerun-if-changed={git_dir}/packed-refs");
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={git_dir}/{branch}");
        }
    }
    println!("cargo:rustc-env=VEIL_COMMIT={commit}");
}

/// A git command's trimmed output, or `None` when git or the repository is not there.
fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}
