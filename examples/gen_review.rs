//! Writes a generated AdmissionReview (the decision bench's shape: an UPDATE
//! of a ConfigMap, ~60% managedFields, one finalizer removed) to stdout, for
//! scripts/load.sh and scripts/soak.sh.
//!
//! ```sh
//! cargo run --release --example gen_review -- OBJECT_BYTES FINALIZERS > review.json
//! ```

use std::io::Write;

#[path = "../tests/common/reviews.rs"]
mod reviews;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("OBJECT_BYTES and FINALIZERS are numbers"))
        .collect();
    let [object_bytes, finalizers] = args.as_slice() else {
        eprintln!("usage: gen_review OBJECT_BYTES FINALIZERS");
        std::process::exit(2);
    };
    let generated = reviews::update_review(reviews::Shape {
        object_bytes: *object_bytes,
        finalizers: (*finalizers).max(1),
        remove_all: false,
    });
    std::io::stdout()
        .write_all(&generated.body)
        .expect("stdout is writable");
}
