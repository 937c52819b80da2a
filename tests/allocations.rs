//! Allocations per review do not grow with the object: `data` and
//! `managedFields` are skipped by the parser, never built. Counted with a
//! counting global allocator (stats_alloc: no unsafe code of ours), on the
//! generated reviews the decision bench uses.
//!
//! `cargo test --release --test allocations -- --nocapture` prints the table.
//! This binary holds one test, so nothing else allocates while it counts.

use std::alloc::System;

use finalizer_guard::admission;
use finalizer_guard::policy::{Policy, Verdict};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

mod common;
use common::reviews;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counted {
    allocations: usize,
    reallocations: usize,
    bytes: usize,
}

/// Allocations made by one review of `body` (after one warm-up review).
fn count(policy: &Policy, body: &[u8]) -> Counted {
    let _ = admission::review(policy, body).expect("a generated review parses");
    let region = Region::new(GLOBAL);
    let reviewed = admission::review(policy, body).expect("a generated review parses");
    let stats = region.change();
    assert_eq!(reviewed.verdict(), Verdict::Authorized);
    drop(reviewed);
    Counted {
        allocations: stats.allocations,
        reallocations: stats.reallocations,
        bytes: stats.bytes_allocated + stats.bytes_reallocated.max(0) as usize,
    }
}

#[test]
fn allocations_per_review_do_not_grow_with_object_size() {
    let policy = Policy::from_yaml(reviews::POLICY).expect("the bench policy is valid");
    let sizes = [("1KiB", 1024), ("3MiB", 3 * 1024 * 1024)];
    println!(
        "| object | finalizers | body bytes | allocations | reallocations | bytes allocated |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for finalizers in [1, 8, 64, 1024] {
        let counted: Vec<Counted> = sizes
            .iter()
            .map(|&(label, object_bytes)| {
                let body = reviews::update_review(reviews::Shape {
                    object_bytes,
                    finalizers,
                    remove_all: false,
                })
                .body;
                let c = count(&policy, &body);
                println!(
                    "| {label} | {finalizers} | {} | {} | {} | {} |",
                    body.len(),
                    c.allocations,
                    c.reallocations,
                    c.bytes
                );
                c
            })
            .collect();
        let (small, big) = (counted[0], counted[1]);
        if finalizers == 1 {
            // A small review builds nothing it does not read.
            assert!(
                small.allocations <= 25,
                "{} allocations for a small review",
                small.allocations
            );
        }
        assert_eq!(
            (small.allocations, small.reallocations),
            (big.allocations, big.reallocations),
            "{finalizers} finalizers: allocations grow with the object"
        );
        // The bytes differ only by the body-independent parts (e.g. digits of a length).
        assert!(
            big.bytes <= small.bytes + 256,
            "{finalizers} finalizers: {} bytes allocated for 3 MiB, {} for 1 KiB",
            big.bytes,
            small.bytes
        );
    }
}
