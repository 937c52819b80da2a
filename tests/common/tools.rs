//! The tools the chart's tests and the live tiers run (helm, kubectl,
//! promtool): named by a variable (`FG_HELM`, `FG_KUBECTL`, `FG_PROMTOOL`),
//! else where the build scripts of `e2e/` cache them, outside the
//! repository (`FG_E2E_CACHE`, else `$XDG_CACHE_HOME/finalizer-guard-e2e`,
//! else `~/.cache/finalizer-guard-e2e`). The tests that need one are
//! `#[ignore]`d: run with `--ignored`, they fail without it, naming how to
//! get it, rather than pass.

use std::path::PathBuf;
use std::process::Command;

use super::repository;

/// Where `e2e/build.sh`, `e2e/helm/build.sh` and `e2e/monitoring/build.sh`
/// cache what they build: `None` only with no variable to find it by.
pub fn cache_dir() -> Option<PathBuf> {
    let set = |var: &str| std::env::var_os(var).filter(|v| !v.is_empty());
    set("FG_E2E_CACHE")
        .map(PathBuf::from)
        .or_else(|| set("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("finalizer-guard-e2e")))
        .or_else(|| set("HOME").map(|h| PathBuf::from(h).join(".cache/finalizer-guard-e2e")))
}

/// The file the variable `var` names, if it is set; fails the test when it
/// names no file.
#[track_caller]
pub fn from_var(var: &str) -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os(var).filter(|v| !v.is_empty())?);
    assert!(path.is_file(), "{var}={} is not a file", path.display());
    Some(path)
}

/// The Helm version `e2e/helm/go.mod` pins.
#[track_caller]
pub fn pinned_helm_version() -> String {
    let go_mod = repository::read("e2e/helm/go.mod");
    go_mod
        .lines()
        .find_map(|l| {
            let l = l.trim();
            l.strip_prefix("require helm.sh/helm/v3 ")
                .or_else(|| l.strip_prefix("helm.sh/helm/v3 "))
        })
        .and_then(|rest| rest.split_whitespace().next())
        .expect("e2e/helm/go.mod requires helm.sh/helm/v3")
        .to_string()
}

/// `FG_HELM`, else the pinned helm `e2e/helm/build.sh` caches: `None`
/// when neither is there.
#[track_caller]
pub fn find_helm() -> Option<PathBuf> {
    if let Some(path) = from_var("FG_HELM") {
        return Some(path);
    }
    let cached = cache_dir()?
        .join(format!("helm-{}", pinned_helm_version()))
        .join("helm");
    cached.is_file().then_some(cached)
}

/// [`find_helm`], or the test fails saying how to get helm.
#[track_caller]
pub fn helm() -> PathBuf {
    find_helm().unwrap_or_else(|| {
        panic!(
            "no helm under {}: set FG_HELM, or build it with e2e/helm/build.sh (.ci/run does)",
            cache_dir().map_or("no cache folder".into(), |d| d.display().to_string())
        )
    })
}

/// `FG_KUBECTL`, else `kubectl` on PATH, else one `e2e/build.sh` caches;
/// or the test fails saying how to get one.
#[track_caller]
pub fn kubectl() -> PathBuf {
    if let Some(path) = from_var("FG_KUBECTL") {
        return path;
    }
    let on_path = Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .is_ok_and(|o| o.status.success());
    if on_path {
        return PathBuf::from("kubectl");
    }
    let cached = cache_dir().and_then(|dir| {
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.path().join("kubectl"))
            .filter(|p| p.is_file())
            .collect();
        // The same one on every run, whatever order the folder lists in.
        found.sort();
        found.pop()
    });
    cached.expect(
        "no kubectl: set FG_KUBECTL, put kubectl on PATH, or build it with e2e/build.sh (.ci/run does)",
    )
}

/// `FG_PROMTOOL`, else the promtool `e2e/monitoring/build.sh promtool`
/// caches (built first if it is not there).
#[track_caller]
pub fn promtool() -> PathBuf {
    from_var("FG_PROMTOOL").unwrap_or_else(|| built("e2e/monitoring/build.sh", "promtool"))
}

/// `FG_PROMETHEUS_CRDS`, else the folder of prometheus-operator's CRDs
/// `e2e/monitoring/build.sh crds` caches (fetched first if it is not there).
#[track_caller]
pub fn prometheus_crds() -> PathBuf {
    match std::env::var_os("FG_PROMETHEUS_CRDS").filter(|v| !v.is_empty()) {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            assert!(
                dir.is_dir(),
                "FG_PROMETHEUS_CRDS={} is not a folder",
                dir.display()
            );
            dir
        }
        None => built("e2e/monitoring/build.sh", "crds"),
    }
}

/// What the build script `script ARG` of the repository prints: the path of
/// what it built or found cached. Fails the test with its output if it fails.
#[track_caller]
pub fn built(script: &str, arg: &str) -> PathBuf {
    let mut cmd = Command::new(repository::path(script));
    cmd.arg(arg);
    let out = super::run::run(cmd, None).ok();
    PathBuf::from(out.stdout.trim())
}
