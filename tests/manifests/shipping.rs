//! What ships beside the manifests: certificates kept out of git, the
//! licence stated, the image's build context holding every file the binary
//! embeds, `.dockerignore` matched as docker applies it.

use super::*;

#[test]
fn gitignore_keeps_certificates_out_of_git() {
    let root = repository::root();
    // `git check-ignore` exits 0 for an ignored path, 1 for a tracked one.
    let ignored = |path: &str| {
        let status = Command::new("git")
            .args(["check-ignore", "--no-index", "-q", path])
            .current_dir(root)
            .status()
            .ok()?;
        match status.code() {
            Some(0) => Some(true),
            Some(1) => Some(false),
            _ => None,
        }
    };
    match ignored("certs/ca.key") {
        None => eprintln!("note: not a git checkout; .gitignore not checked"),
        Some(_) => {
            for path in [
                "certs/ca.key",
                "certs/ca.crt",
                "certs/tls.key",
                "certs/tls.crt",
                "manifests/overlays/self-managed/tls.key",
                "manifests/overlays/self-managed/tls.crt",
                "manifests/overlays/self-managed/ca.crt",
                "manifests/overlays/self-managed/ca.key",
            ] {
                assert_eq!(ignored(path), Some(true), "{path} is not git-ignored");
            }
            for path in [
                "certs/README.md",
                "manifests/overlays/self-managed/kustomization.yaml",
            ] {
                assert_eq!(ignored(path), Some(false), "{path} is git-ignored");
            }
        }
    }
}

/// One licence, said the same in the crate, the chart and the image.
#[test]
fn the_licence_is_stated_wherever_the_product_ships() {
    let root = repository::root();
    let licence = env!("CARGO_PKG_LICENSE");
    assert_eq!(licence, "Apache-2.0");
    let text = std::fs::read_to_string(root.join("LICENSE")).unwrap();
    assert!(
        text.contains("Apache License") && text.contains("Version 2.0, January 2004"),
        "LICENSE is the Apache License 2.0"
    );
    assert!(
        text.contains("END OF TERMS AND CONDITIONS"),
        "LICENSE is whole"
    );
    let chart: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(root.join("charts/finalizer-guard/Chart.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        chart["annotations"]["artifacthub.io/license"],
        json!(licence),
        "Chart.yaml's Artifact Hub licence"
    );
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    assert!(
        dockerfile.contains(&format!("org.opencontainers.image.licenses=\"{licence}\""))
            && dockerfile.contains("COPY LICENSE "),
        "the image is labelled and carries the licence"
    );
}

/// `docker build .` (the Dockerfile's `COPY . .`) compiles: every file the
/// binary's code embeds (`include_str!`, `include_bytes!` outside the
/// file's `#[cfg(test)]` part) is in the build context `.dockerignore`
/// leaves, as are Cargo.toml, Cargo.lock and src/.
#[test]
fn the_image_build_context_holds_every_file_the_binary_embeds() {
    let root = repository::root();
    let rules = DockerIgnore::read(&root.join(".dockerignore"));
    for always in ["Cargo.toml", "Cargo.lock", "src/main.rs", "src/lib.rs"] {
        assert!(!rules.ignores(always), ".dockerignore leaves out {always}");
    }
    for key in [
        "certs/tls.key",
        "manifests/base/tls.key",
        "manifests/base/ca.pem",
        "manifests/overlays/self-managed/tls.crt",
    ] {
        assert!(rules.ignores(key), ".dockerignore lets {key} in");
    }
    let mut embedded = Vec::new();
    let mut sources = vec![root.join("src")];
    while let Some(dir) = sources.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources.push(path);
                continue;
            }
            if path.extension() != Some(OsStr::new("rs")) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for (at, _) in code.match_indices("include_") {
                let rest = &code[at + "include_".len()..];
                let Some(rest) = rest
                    .strip_prefix("str!(\"")
                    .or_else(|| rest.strip_prefix("bytes!(\""))
                else {
                    continue;
                };
                let file = &rest[..rest.find('"').expect("a closing quote")];
                // Relative to the including file, as the macros resolve it.
                let mut resolved = path.parent().unwrap().to_path_buf();
                for part in Path::new(file).components() {
                    match part {
                        std::path::Component::ParentDir => {
                            resolved.pop();
                        }
                        other => resolved.push(other),
                    }
                }
                let relative = resolved.strip_prefix(root).unwrap().to_path_buf();
                assert!(
                    resolved.is_file(),
                    "{} embeds {file}: missing",
                    path.display()
                );
                embedded.push((path.strip_prefix(root).unwrap().to_path_buf(), relative));
            }
        }
    }
    assert!(
        embedded
            .iter()
            .any(|(_, f)| f == Path::new("manifests/base/webhook.yaml")),
        "the static export's webhook is found among the embedded files: {embedded:?}"
    );
    for (source, file) in &embedded {
        let file = file.to_str().unwrap();
        assert!(
            !rules.ignores(file),
            "{} embeds {file}, which .dockerignore leaves out of the image's build context",
            source.display()
        );
    }
}

/// `.dockerignore`'s rules, as Docker and podman apply them: each line a
/// pattern of `/`-separated parts (`*` and `?` within a part, `**` any
/// number of parts), matching a path or one of its parent folders; `!`
/// takes a match back; the last matching line wins.
struct DockerIgnore(Vec<(bool, Vec<String>)>);

impl DockerIgnore {
    fn read(path: &Path) -> DockerIgnore {
        let text = std::fs::read_to_string(path).unwrap();
        DockerIgnore(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(|l| {
                    let (keep, pattern) = match l.strip_prefix('!') {
                        Some(p) => (true, p),
                        None => (false, l),
                    };
                    let parts = pattern
                        .trim_matches('/')
                        .split('/')
                        .map(str::to_string)
                        .collect();
                    (keep, parts)
                })
                .collect(),
        )
    }

    fn ignores(&self, path: &str) -> bool {
        let parts: Vec<&str> = path.split('/').collect();
        let mut ignored = false;
        for (keep, pattern) in &self.0 {
            // The path itself or a folder it is in.
            if (1..=parts.len()).any(|n| parts_match(pattern, &parts[..n])) {
                ignored = !keep;
            }
        }
        ignored
    }
}

fn parts_match(pattern: &[String], path: &[&str]) -> bool {
    match (pattern.first(), path.first()) {
        (None, None) => true,
        (Some(p), _) if p == "**" => {
            parts_match(&pattern[1..], path)
                || (!path.is_empty() && parts_match(pattern, &path[1..]))
        }
        (Some(p), Some(first)) => {
            glob(p.as_bytes(), first.as_bytes()) && parts_match(&pattern[1..], &path[1..])
        }
        _ => false,
    }
}

fn glob(pattern: &[u8], name: &[u8]) -> bool {
    match (pattern.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            glob(&pattern[1..], name) || (!name.is_empty() && glob(pattern, &name[1..]))
        }
        (Some(b'?'), Some(_)) => glob(&pattern[1..], &name[1..]),
        (Some(p), Some(n)) if p == n => glob(&pattern[1..], &name[1..]),
        _ => false,
    }
}

#[test]
fn dockerignore_rules_match_as_docker_applies_them() {
    let rules = DockerIgnore(
        [
            (false, "target"),
            (false, "manifests/*"),
            (true, "manifests/base"),
            (false, "**/*.key"),
        ]
        .into_iter()
        .map(|(keep, p)| (keep, p.split('/').map(str::to_string).collect()))
        .collect(),
    );
    for ignored in [
        "target",
        "target/debug/x",
        "a.key",
        "certs/deep/tls.key",
        "manifests/overlays/x.yaml",
        "manifests/base/tls.key",
    ] {
        assert!(rules.ignores(ignored), "{ignored}");
    }
    for kept in [
        "src/target.rs",
        "a.keys",
        "manifests/base/webhook.yaml",
        "manifests",
    ] {
        assert!(!rules.ignores(kept), "{kept}");
    }
}
