//! `certs`, and the certificates `serve` makes or reuses: their names, their
//! files' modes, and no symlink or folder of someone else's trusted.

use super::*;

#[test]
fn certs_writes_a_chain_with_service_sans_and_prints_the_ca_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    let o = run(&[
        "certs",
        "--service",
        "fg",
        "--namespace",
        "ops",
        "--out",
        out.to_str().unwrap(),
        "--dns",
        "fg.example.com",
        "--ip",
        "10.0.0.7",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    for f in ["ca.crt", "ca.key", "tls.crt", "tls.key"] {
        assert!(Path::new(&out.join(f)).exists(), "{f}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(out.join("tls.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "tls.key is readable by others");
    }
    use base64::Engine;
    let bundle = base64::engine::general_purpose::STANDARD
        .decode(stdout(&o).trim())
        .unwrap();
    assert_eq!(bundle, std::fs::read(out.join("ca.crt")).unwrap());
    let err = stderr(&o);
    for san in [
        "fg.ops.svc",
        "fg.ops.svc.cluster.local",
        "fg.example.com",
        "10.0.0.7",
    ] {
        assert!(err.contains(san), "{err}");
    }

    // Re-running keeps the CA, so the caBundle in the cluster stays valid.
    let again = run(&[
        "certs",
        "--service",
        "fg",
        "--namespace",
        "ops",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(stdout(&again), stdout(&o));
}

#[cfg(unix)]
#[test]
fn certs_reuse_no_ca_that_someone_else_could_have_planted_or_can_change() {
    use std::os::unix::fs::{PermissionsExt, symlink};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    let o = run(&["certs", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Its own CA, in its own folder: reused.
    let o = run(&["certs", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("reusing the CA in"), "{}", stderr(&o));
    // The folder writable by others: whoever could write there could have
    // put their own CA (and key) in place.
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = run(&["certs", "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("is writable by others (mode 0777)"),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("not reusing the CA found there"),
        "{}",
        stderr(&o)
    );
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A CA key that is a symlink to a key elsewhere.
    let elsewhere = dir.path().join("planted.key");
    std::fs::rename(out.join("ca.key"), &elsewhere).unwrap();
    symlink(&elsewhere, out.join("ca.key")).unwrap();
    let o = run(&["certs", "--out", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("is a symlink"), "{}", stderr(&o));
}

/// `certs` writes each file as a new file renamed into place: a key is
/// readable by its owner only even where the file it replaces was not, and
/// a symlink at a file's name is replaced, the file it led to untouched.
#[cfg(unix)]
#[test]
fn certs_never_keep_a_loose_mode_nor_write_through_a_symlink() {
    use std::os::unix::fs::{PermissionsExt, symlink};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    std::fs::create_dir(&out).unwrap();
    for key in ["tls.key", "client.key"] {
        std::fs::write(out.join(key), "old key\n").unwrap();
        std::fs::set_permissions(out.join(key), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let outside = dir.path().join("outside.pem");
    std::fs::write(&outside, "not yours to write\n").unwrap();
    symlink(&outside, out.join("tls.crt")).unwrap();
    let dangling = dir.path().join("created-through-the-link");
    symlink(&dangling, out.join("ca.key")).unwrap();

    let o = run(&[
        "certs",
        "--out",
        out.to_str().unwrap(),
        "--client",
        "kube-apiserver",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));

    for (file, mode) in [
        ("ca.key", 0o600),
        ("tls.key", 0o600),
        ("client.key", 0o600),
        ("ca.crt", 0o644),
        ("tls.crt", 0o644),
        ("client.crt", 0o644),
    ] {
        let meta = std::fs::symlink_metadata(out.join(file)).unwrap();
        assert!(meta.file_type().is_file(), "{file} is not a regular file");
        // A umask takes bits away, never adds them.
        assert_eq!(
            meta.permissions().mode() & 0o7777 & !mode,
            0,
            "{file}: {:o}",
            meta.permissions().mode()
        );
        assert!(
            std::fs::read_to_string(out.join(file))
                .unwrap()
                .starts_with("-----BEGIN"),
            "{file}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "not yours to write\n"
    );
    assert!(
        !dangling.exists(),
        "a key was written through a dangling symlink"
    );
    // Nothing left behind but the six files.
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "ca.crt",
            "ca.key",
            "client.crt",
            "client.key",
            "tls.crt",
            "tls.key"
        ]
    );
}

/// `serve` in dev mode writes its CA into a folder of the user's own that
/// no one else may write in: a folder that is a symlink, or that others
/// may write in (where they could plant a symlink), is refused, saying why;
/// in one of the user's own, a symlink at `ca.crt` is replaced, not followed.
#[cfg(unix)]
#[test]
fn serve_dev_mode_refuses_a_folder_others_control_and_never_follows_a_symlink() {
    use std::os::unix::fs::{PermissionsExt, symlink};
    let dir = tempfile::tempdir().unwrap();
    let outside = dir.path().join("victim");
    std::fs::write(&outside, "keep me\n").unwrap();
    let serve = |dev: &Path| {
        let mut serve = bin();
        serve
            .args(["serve", "--dev-cert-dir"])
            .arg(dev)
            .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .env_remove("FINALIZER_GUARD_POLICY")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        serve
    };
    // A refusal ends at once; a serve that does not refuse is stopped
    // after 30 s, its status then `None`.
    let refused = |dev: &Path| {
        let mut child = serve(dev).spawn().unwrap();
        exits_within(&mut child, Duration::from_secs(30));
        let _ = child.kill();
        let o = child.wait_with_output().unwrap();
        (o.status.code(), stderr(&o))
    };

    // A folder anyone may write in, with a symlink planted in it.
    let open = dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    symlink(&outside, open.join("ca.crt")).unwrap();
    let (code, err) = refused(&open);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("is writable by others (mode 0777)"), "{err}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep me\n");
    // Group-writable: the same.
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o770)).unwrap();
    let (code, err) = refused(&open);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("is writable by its group (mode 0770)"),
        "{err}"
    );

    // The folder itself a symlink (to a folder of the user's own).
    let mine = dir.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o700)).unwrap();
    let link = dir.path().join("link");
    symlink(&mine, &link).unwrap();
    let (code, err) = refused(&link);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("is a symlink"), "{err}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep me\n");
    assert!(!mine.join("ca.crt").exists());

    // A folder of the user's own holding a symlink: replaced, not followed.
    symlink(&outside, mine.join("ca.crt")).unwrap();
    let mut child = serve(&mine).spawn().unwrap();
    let regular = || std::fs::symlink_metadata(mine.join("ca.crt")).is_ok_and(|m| m.is_file());
    poll_blocking(Duration::from_secs(30), LOCAL_POLL, || {
        regular() || child.try_wait().unwrap().is_some()
    });
    let written = regular();
    let _ = child.kill();
    let o = child.wait_with_output().unwrap();
    assert!(written, "ca.crt never became a file of its own: {o:?}");
    assert!(
        std::fs::read_to_string(mine.join("ca.crt"))
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----")
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "keep me\n");
    // A folder it makes is the user's alone.
    let made = dir.path().join("made/dev");
    let mut child = serve(&made).spawn().unwrap();
    poll_blocking(Duration::from_secs(30), LOCAL_POLL, || {
        made.join("ca.crt").exists() || child.try_wait().unwrap().is_some()
    });
    let _ = child.kill();
    let o = child.wait_with_output().unwrap();
    let mode = std::fs::metadata(&made).map(|m| m.permissions().mode() & 0o777);
    assert!(matches!(mode, Ok(m) if m & 0o077 == 0), "{mode:?} {o:?}");
}

/// `certs` refuses a name no certificate check could match
/// ([`a_bad_flag_value_is_repeated_escaped_and_cut_never_raw`] has each
/// flag's words) before it writes anything, and takes a wildcard.
#[test]
fn certs_refuses_a_name_no_certificate_check_could_match_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("certs");
    let out = out.to_str().unwrap();
    let o = run(&["certs", "--out", out, "--dns", "a b"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(!Path::new(out).exists(), "nothing written");

    let o = run(&["certs", "--out", out, "--dns", "*.example.com"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("*.example.com"), "{}", stderr(&o));
}

/// `serve --certificates-secret`: a malformed Secret name, a conflict with
/// `--tls-cert`, margins that overlap and an API server it cannot reach are
/// each refused before anything is served, with what to fix.
#[test]
fn serve_refuses_self_managed_certificates_it_cannot_keep() {
    let o = run(&["serve", "--certificates-secret", "just-a-name"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(
        stderr(&o).contains(r#""just-a-name" is not NAMESPACE/NAME"#),
        "{o:?}"
    );

    let o = run(&[
        "serve",
        "--certificates-secret",
        "fg/c",
        "--tls-cert",
        "a",
        "--tls-key",
        "b",
    ]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    assert!(stderr(&o).contains("cannot be used with"), "{o:?}");

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = unreachable_kubeconfig(dir.path());
    let serve = |extra: &[&str]| {
        let mut args = vec![
            "serve",
            "--certificates-secret",
            "fg/fg-certificates",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--events",
            "false",
        ];
        args.extend_from_slice(extra);
        let mut cmd = bin();
        cmd.args(&args)
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("FINALIZER_GUARD_POLICY");
        cmd.output().unwrap()
    };
    let o = serve(&[
        "--ca-renew-before",
        "30m",
        "--ca-grace",
        "10m",
        "--certificate-renew-before",
        "20m",
    ]);
    assert_ne!(o.status.code(), Some(0), "{o:?}");
    assert!(
        stderr(&o).contains("--ca-renew-before (1800s) must be at least --certificate-renew-before (1200s) plus twice --ca-grace (600s"),
        "{o:?}"
    );
    let o = serve(&[]);
    assert_ne!(o.status.code(), Some(0), "{o:?}");
    assert!(
        stderr(&o).contains("certificates Secret: cannot get secret fg/fg-certificates"),
        "{o:?}"
    );
    assert!(!stderr(&o).contains("panicked"), "{o:?}");
}
