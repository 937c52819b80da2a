//! What the test crates share, one theme a module: a helper a second crate
//! needs moves here rather than being copied. A crate of `tests/` takes it
//! with `mod common;`; `tests/cli`, `tests/e2e` and `tests/nodes` with
//! `#[path = "../common/mod.rs"] mod common;`; benches and examples include
//! `reviews.rs` alone by `#[path]`. Each crate uses a part.
//!
//! - [`assert`]: what a command printed, checked line by line
//!   ([`assert::assert_prints`]), every missing line named at once.
//! - [`wait`]: every poll for a condition, bounded in time and naming what
//!   it waited for when it gives up; never a bare sleep in its place (a
//!   sleep stays only where the time itself is under test, saying so).
//! - [`server`]: a server on loopback and HTTPS clients that trust it as
//!   kube-apiserver does.
//! - [`pod`]: the seed review (pod `web-0`, its finalizer stripped).
//! - [`cel`]: a review bound for CEL as kube-apiserver binds it, and the
//!   case files it is evaluated on.
//! - [`reviews`]: generated AdmissionReviews of a given size.
//! - [`run`]: a command run to its end, what it printed and its exit code,
//!   its exit checked with all it printed shown when it is not the one expected.
//! - [`shared`]: the corpus outside the repository (`../shared`), which a
//!   test reading it requires unless `FG_NO_SHARED=1`.
//! - [`repository`]: the repository's root, and paths and files under it.
//! - [`tools`]: helm, kubectl, promtool and prometheus-operator's CRDs,
//!   named by `FG_*` or cached by the build scripts of `e2e/`.
//! - [`live`]: against a live cluster: a command's run, kubectl's words for
//!   a denial, an admin port's GET.
#![allow(dead_code, unused_imports)]

pub mod assert;
pub mod cel;
pub mod live;
pub mod pod;
pub mod repository;
pub mod reviews;
pub mod run;
pub mod server;
pub mod shared;
pub mod tools;
pub mod wait;

pub use pod::{pod, strip, update};
pub use server::*;
