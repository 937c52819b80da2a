//! The audit record's one shape: the line the review writes by hand (fast),
//! the serde `AuditRecord` that reads it, and the facts Events and the
//! review's span take from the review itself, held equal field for field
//! over every example review and a few hundred generated ones; and the
//! bytes written held to those of the writer before it was split
//! (`tests/fixtures/audit/`).
//!
//! `BLESS=1 cargo test --test audit_record` writes the fixtures anew.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use finalizer_guard::admission::audit::{self, AuditRecord, MAX_AUDITED_FINALIZERS};
use finalizer_guard::admission::cut::cut;
use finalizer_guard::admission::ledger::MAX_LEDGER_ENTRIES;
use finalizer_guard::admission::{self, ReviewBuilder, Reviewed};
use finalizer_guard::policy::Policy;
use serde_json::{Value, json};

/// The embedded default policy, and one with a rule, so records name what authorized a removal.
fn policies() -> [Policy; 2] {
    let with_rule = finalizer_guard::policy::from_bytes(
        br#"mode: enforce
builtinControllers: true
rules:
  - name: shop-oncall
    finalizers: ["example.com/cleanup", "example.com/lo\"ck"]
    groups: ["shop-oncall"]
override:
  annotation: finalizer-guard.io/override
  reasons: [node-lost, "controller-unavailable"]
"#,
    )
    .expect("the test policy loads");
    [Policy::embedded_default(), with_rule]
}

/// A small deterministic generator (xorshift), so the fixtures stay put.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.roll(from.len())]
    }
}

/// Strings a request may carry: plain, escaped in JSON, non-ASCII, long.
fn text(dice: &mut Dice, base: &str) -> String {
    match dice.roll(6) {
        0 => format!("{base}\"quoted\\"),
        1 => format!("{base}-é✓\u{1}\t"),
        2 => base.repeat(700 / base.len().max(1) + 1),
        _ => base.to_string(),
    }
}

/// One generated review body.
fn generated(dice: &mut Dice) -> Vec<u8> {
    let name = dice_name(dice);
    let user = text(dice, name);
    let mut review = ReviewBuilder::pod_update(&user);
    let groups: Vec<String> = match dice.roll(4) {
        0 => vec![],
        1 => (0..70).map(|i| format!("g{i}")).collect(),
        _ => vec!["system:authenticated".into(), text(dice, "shop-oncall")],
    };
    review = review.groups(&groups.iter().map(String::as_str).collect::<Vec<_>>());
    if name.starts_with("system:serviceaccount:") {
        // What a bound ServiceAccount token carries; no roll of the dice, so
        // the other generated reviews stay as they were.
        review = review
            .extra(
                "authentication.kubernetes.io/credential-id",
                &["JTI=7c9f2a3e-1b4d-4e8a-9f6b-2d3c4e5f6a7b"],
            )
            .extra("authentication.kubernetes.io/node-name", &["worker-3"])
            .extra("authentication.kubernetes.io/pod-name", &["ctl-0"])
            .extra("we\"ird\nkey\u{2028}", &["a\\b", "</script>"]);
    }
    let finalizers: Vec<String> = match dice.roll(5) {
        0 => (0..MAX_AUDITED_FINALIZERS + 3)
            .map(|i| format!("example.com/f{i}"))
            .collect(),
        1 => vec![text(dice, "example.com/odd")],
        _ => vec![
            "example.com/cleanup".into(),
            "example.com/lo\"ck".into(),
            "kubernetes.io/pvc-protection".into(),
        ],
    };
    let old = json!(finalizers);
    let new = match dice.roll(3) {
        0 => json!(finalizers[1..].to_vec()),
        _ => json!(null),
    };
    review = review.finalizers(old, new);
    match dice.roll(5) {
        0 => review = review.annotate("finalizer-guard.io/override", "node-lost: INC-4711"),
        1 => {
            let detail = text(dice, "INC \"7\"");
            review = review.annotate(
                "finalizer-guard.io/override",
                &format!("controller-unavailable: {detail}"),
            );
        }
        2 => review = review.annotate("finalizer-guard.io/override", "bogus"),
        _ => {}
    }
    if dice.roll(3) == 0 {
        // More volumes than a ledger lists: `volumesOmitted`.
        let volumes: Vec<_> = (0..MAX_LEDGER_ENTRIES + 4)
            .map(|i| json!({"name": format!("v\"{i}\n"), "persistentVolumeClaim": {"claimName": "data"}}))
            .collect();
        review = review.edit_old_object(|o| {
            o["spec"] = json!({"nodeName": "worker-3", "volumes": volumes});
        });
    }
    match dice.roll(4) {
        0 => {
            review = review
                .resource("example.com", "v1", "widgets", "Widget")
                .namespace(None)
                .name(&text(dice, "w"));
        }
        1 => review = review.namespace(Some(&text(dice, "shop"))),
        2 => review = review.subresource("status"),
        _ => {}
    }
    if dice.roll(4) == 0 {
        review = review.dry_run(true);
    }
    if dice.roll(5) == 0 {
        review = review.edit_old_object(|o| {
            o["metadata"].as_object_mut().unwrap().remove("uid");
        });
    }
    review
        .uid(&format!("uid-{}", dice.roll(1_000_000)))
        .to_vec()
}

fn dice_name(dice: &mut Dice) -> &'static str {
    dice.pick(&["jane", "system:serviceaccount:shop:ctl", "bob"])
}

/// Every review the tests judge: the examples, by name, and the generated ones.
fn reviews() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/reviews");
    let mut examples: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    examples.sort();
    assert!(examples.len() >= 4, "the examples are there: {dir:?}");
    let mut all: Vec<(String, Vec<u8>)> = examples
        .iter()
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(p).unwrap())
        })
        .collect();
    let mut dice = Dice(0x9e37_79b9_7f4a_7c15);
    for i in 0..300 {
        all.push((format!("generated-{i}"), generated(&mut dice)));
    }
    all
}

/// Each review judged under each policy that audits it.
fn judged() -> Vec<(String, Reviewed)> {
    let policies = policies();
    let mut out = Vec::new();
    for (name, body) in reviews() {
        for (p, policy) in policies.iter().enumerate() {
            let at = jiff::Timestamp::from_second(1_800_000_000).unwrap();
            let reviewed =
                admission::review_at(policy, &body, at).unwrap_or_else(|e| panic!("{name}: {e}"));
            if reviewed.audit.is_some() {
                out.push((format!("{name}.policy-{p}"), reviewed));
            }
        }
    }
    out
}

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audit/fields.txt")
}

/// `NAME FIELDS`, a line per audited review; a generated review's fields
/// as their sha256, to keep the fixture small.
fn written() -> String {
    let mut out = String::new();
    for (name, reviewed) in judged() {
        let fields = reviewed.audit.unwrap().fields().to_string();
        if name.starts_with("generated-") {
            let digest = ring::digest::digest(&ring::digest::SHA256, fields.as_bytes());
            let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
            let _ = writeln!(out, "{name} sha256:{hex} ({} bytes)", fields.len());
        } else {
            let _ = writeln!(out, "{name} {fields}");
        }
    }
    out
}

#[test]
fn the_writer_writes_the_bytes_it_always_wrote() {
    let got = written();
    if std::env::var_os("BLESS").is_some() {
        std::fs::create_dir_all(fixture().parent().unwrap()).unwrap();
        std::fs::write(fixture(), &got).unwrap();
    }
    let want = std::fs::read_to_string(fixture()).expect("tests/fixtures/audit/fields.txt");
    let (got, want): (Vec<&str>, Vec<&str>) = (got.lines().collect(), want.lines().collect());
    assert_eq!(got.len(), want.len(), "as many audited reviews");
    assert!(got.len() > 300, "most generated reviews are audited");
    for (got, want) in got.iter().zip(&want) {
        assert_eq!(got, want);
    }
}

#[test]
fn the_record_read_back_is_the_line_written_field_for_field() {
    for (name, reviewed) in judged() {
        let entry = reviewed.audit.as_ref().unwrap();
        let written: Value = serde_json::from_str(&format!("{{{}}}", entry.fields())).unwrap();
        let record: AuditRecord = entry.record().unwrap_or_else(|e| panic!("{name}: {e}"));
        let read: Value = serde_json::to_value(&record).unwrap();
        let (written, read) = (written.as_object().unwrap(), read.as_object().unwrap());
        assert_eq!(
            written.keys().collect::<Vec<_>>(),
            read.keys().collect::<Vec<_>>(),
            "{name}: the same fields"
        );
        for (key, value) in written {
            assert_eq!(value, &read[key], "{name}: {key}");
        }
        assert_eq!(
            format!("{{{}}}", entry.fields()),
            serde_json::to_string(&record).unwrap(),
            "{name}: the same bytes"
        );
    }
}

#[test]
fn what_events_and_the_span_take_from_the_review_is_what_the_record_says() {
    for (name, reviewed) in judged() {
        let entry = reviewed.audit.as_ref().unwrap();
        let record = entry.record().unwrap();
        let judged = entry.judged();
        assert_eq!(judged.uid, record.uid, "{name}");
        assert_eq!(judged.user, record.user, "{name}");
        assert_eq!(judged.resource, record.resource, "{name}");
        assert_eq!(judged.object_kind, record.object_kind, "{name}");
        assert_eq!(
            judged.object_api_version, record.object_api_version,
            "{name}"
        );
        assert_eq!(judged.namespace, record.namespace, "{name}");
        assert_eq!(judged.name, record.name, "{name}");
        assert_eq!(judged.object_uid, record.object_uid, "{name}");
        assert_eq!(judged.dry_run, record.dry_run, "{name}");
        assert_eq!(entry.dry_run(), record.dry_run, "{name}");
        let decision = &reviewed.decision;
        assert_eq!(decision.verdict(), record.decision, "{name}");
        let listed: Vec<(String, bool)> = audit::listed(decision)
            .map(|r| (cut(&r.finalizer).into_owned(), r.authorized_by.is_some()))
            .collect();
        let recorded: Vec<(String, bool)> = record
            .removed_finalizers
            .iter()
            .map(|r| (r.finalizer.clone(), r.authorized_by.is_some()))
            .collect();
        assert_eq!(listed, recorded, "{name}");
        let used = decision.override_used();
        assert_eq!(
            used.map(|o| cut(&o.reason).into_owned()),
            record.override_reason,
            "{name}"
        );
        assert_eq!(
            used.map(|o| cut(&o.detail).into_owned()),
            record.override_detail,
            "{name}"
        );
        assert_eq!(
            decision
                .evidence
                .approved_by
                .as_deref()
                .map(|a| cut(a).into_owned()),
            record.approved_by,
            "{name}"
        );
        assert_eq!(reviewed.ledger, record.protected, "{name}");
    }
}

#[test]
fn user_info_extra_is_recorded_bounded_cut_and_escaped() {
    use finalizer_guard::admission::request::{MAX_EXTRA_KEYS, MAX_EXTRA_VALUES};
    let long = "x".repeat(100_000);
    let many: Vec<String> = (0..40).map(|i| format!("v{i:02}")).collect();
    let mut review = ReviewBuilder::pod_update("system:serviceaccount:shop:ctl")
        .finalizers(json!(["example.com/cleanup"]), json!([]))
        .extra(
            "a-many",
            &many.iter().map(String::as_str).collect::<Vec<_>>(),
        )
        .extra("a-long", &[&long])
        .extra("a-\"odd\"\n\u{2028}", &["</script>\u{0}"]);
    for i in 0..30 {
        review = review.extra(&format!("k{i:02}"), &["v"]);
    }
    let at = jiff::Timestamp::from_second(1_800_000_000).unwrap();
    let reviewed = admission::review_at(&Policy::embedded_default(), &review.to_vec(), at).unwrap();
    let entry = reviewed.audit.unwrap();
    let line: Value = serde_json::from_str(&entry.line_at(at)).expect("one JSON line");
    assert!(!entry.line_at(at).contains('\n'));
    let record = entry.record().unwrap();
    assert_eq!(serde_json::to_value(&record.extra).unwrap(), line["extra"]);
    assert_eq!(record.extra.len(), MAX_EXTRA_KEYS);
    assert_eq!(record.extra["a-many"].len(), MAX_EXTRA_VALUES);
    assert_eq!(record.extra["a-many"][0], "v00");
    assert!(record.extra["a-long"][0].chars().count() < 1_000);
    assert_eq!(record.extra["a-\"odd\"\n\u{2028}"], ["</script>\u{0}"]);
    // The body's first keys are the ones kept (kube-apiserver sorts them).
    assert!(record.extra.contains_key("k00"));
    assert!(!record.extra.contains_key("k29"));
    // No extra, no field.
    let plain = ReviewBuilder::pod_update("jane")
        .finalizers(json!(["example.com/cleanup"]), json!([]))
        .to_vec();
    let reviewed = admission::review_at(&Policy::embedded_default(), &plain, at).unwrap();
    assert!(!reviewed.audit.unwrap().fields().contains("\"extra\""));
}

/// Go writes a nil list as `null` (an authenticator's extra key with no
/// values): read as an empty list, for a key kept and one dropped alike,
/// never a refused review.
#[test]
fn a_null_extra_value_is_an_empty_list() {
    let mut body: Value = serde_json::from_slice(
        &ReviewBuilder::pod_update("system:serviceaccount:shop:ctl")
            .finalizers(json!(["example.com/cleanup"]), json!([]))
            .to_vec(),
    )
    .unwrap();
    let mut extra = serde_json::Map::new();
    extra.insert("a-null".into(), Value::Null);
    for i in 0..20 {
        extra.insert(format!("k{i:02}"), Value::Null);
    }
    body["request"]["userInfo"]["extra"] = Value::Object(extra);
    let at = jiff::Timestamp::from_second(1_800_000_000).unwrap();
    let reviewed = admission::review_at(
        &Policy::embedded_default(),
        &serde_json::to_vec(&body).unwrap(),
        at,
    )
    .expect("a null extra value is read, not refused");
    let record = reviewed.audit.unwrap().record().unwrap();
    assert_eq!(record.extra["a-null"], Vec::<String>::new());
}
