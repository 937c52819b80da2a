//! What `finalizer-guard version` says: the commit, the target and the build
//! date, set at compile time.
//!
//! scripts/release.sh sets them (`FG_BUILD_COMMIT`, `FG_BUILD_EPOCH`: the
//! commit's time, so a rebuild of a commit is the same binary; else
//! `SOURCE_DATE_EPOCH`), and
//! `FG_BUILD_AUDITABLE=1` when the dependency list is embedded (`cargo
//! auditable`). Otherwise the commit is read from git when there is one
//! (`-dirty` when a tracked file differs), and the date is the build's; a
//! build without git (a source archive, a container build without .git)
//! says `unknown`.

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    for var in [
        "FG_BUILD_COMMIT",
        "FG_BUILD_EPOCH",
        "FG_BUILD_AUDITABLE",
        "SOURCE_DATE_EPOCH",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }

    let commit = match std::env::var("FG_BUILD_COMMIT") {
        Ok(commit) if !commit.is_empty() => commit,
        _ => git_commit().unwrap_or_else(|| "unknown".to_string()),
    };
    let epoch = ["FG_BUILD_EPOCH", "SOURCE_DATE_EPOCH"]
        .iter()
        .find_map(|var| std::env::var(var).ok()?.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64)
        });
    let auditable = std::env::var("FG_BUILD_AUDITABLE").is_ok_and(|v| v == "1");

    println!("cargo:rustc-env=FG_BUILD_COMMIT={commit}");
    println!(
        "cargo:rustc-env=FG_BUILD_TARGET={}",
        std::env::var("TARGET").unwrap_or_default()
    );
    println!("cargo:rustc-env=FG_BUILD_DATE={}", rfc3339(epoch));
    println!(
        "cargo:rustc-env=FG_BUILD_AUDITABLE={}",
        if auditable { "1" } else { "0" }
    );
}

/// The checked-out commit, `-dirty` when a tracked file differs from it; None
/// without git or outside a repository. Rebuilt when HEAD, the branch or the
/// index moves.
fn git_commit() -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .arg("--no-optional-locks")
            .args(args)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "HEAD"])?;
    if commit.len() != 40 && commit.len() != 64 {
        return None;
    }
    let mut watched = vec![
        "HEAD".to_string(),
        "index".to_string(),
        "packed-refs".to_string(),
    ];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name])
            && Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|status| !status.is_empty());
    Some(if dirty {
        format!("{commit}-dirty")
    } else {
        commit
    })
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (UTC), by the civil
/// calendar (Howard Hinnant's days_from_civil, inverted).
fn rfc3339(epoch: i64) -> String {
    let days = epoch.div_euclid(86_400);
    let secs = epoch.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}
