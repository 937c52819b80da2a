//! Runs one step of a review many times over one body, for an instruction
//! count under callgrind (repeatable on a busy machine, unlike a timer):
//! the difference between two runs of different counts, divided by the
//! difference of the counts, is what one step costs.
//!
//! ```sh
//! cargo build --release --example profile_review
//! for n in 1000 2000; do
//!   valgrind --tool=callgrind --callgrind-out-file=cg.$n \
//!     target/release/examples/profile_review review FILE_OR_SHAPE $n
//! done
//! ```
//!
//! STEP is `review` (`admission::review` under the bench policy, or the
//! embedded policy for a FILE), `parse` (its parse alone) or `scan`
//! (serde_json's `IgnoredAny` scan of the same bytes). FILE_OR_SHAPE is an
//! AdmissionReview file, or `OBJECT_BYTES:FINALIZERS` for a generated one
//! (`:all` removes every finalizer).

use std::hint::black_box;

use finalizer_guard::admission;
use finalizer_guard::policy::Policy;
use serde::de::IgnoredAny;

#[path = "../tests/common/reviews.rs"]
mod reviews;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [step, input, count] = args.as_slice() else {
        eprintln!(
            "usage: profile_review review|parse|scan FILE|OBJECT_BYTES:FINALIZERS[:all] COUNT"
        );
        std::process::exit(2);
    };
    let count: usize = count.parse().expect("COUNT is a number");
    let (body, policy) = match input.split(':').collect::<Vec<_>>().as_slice() {
        [bytes, finalizers, rest @ ..] => {
            let shape = reviews::Shape {
                object_bytes: bytes.parse().expect("OBJECT_BYTES is a number"),
                finalizers: finalizers.parse().expect("FINALIZERS is a number"),
                remove_all: rest == ["all"],
            };
            let policy = Policy::from_yaml(reviews::POLICY).expect("the bench policy is valid");
            (reviews::update_review(shape).body, policy)
        }
        _ => {
            let text = std::fs::read(input).expect("a readable review file");
            // Compacted, as kube-apiserver sends it.
            let value: serde_json::Value = serde_json::from_slice(&text).expect("JSON");
            (
                serde_json::to_vec(&value).expect("JSON"),
                Policy::embedded_default(),
            )
        }
    };
    for _ in 0..count {
        match step.as_str() {
            "review" => {
                black_box(admission::review(&policy, black_box(&body)).expect("decided"));
            }
            "parse" => {
                black_box(admission::parse(black_box(&body)).expect("parsed"));
            }
            "scan" => {
                black_box(serde_json::from_slice::<IgnoredAny>(black_box(&body)).expect("JSON"));
            }
            other => {
                eprintln!("unknown step {other:?}: review, parse or scan");
                std::process::exit(2);
            }
        }
    }
}
