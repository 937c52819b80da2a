//! Which list a finalizer sits in: the one word the built-in table, the
//! policy and the change share.

/// Which list a finalizer sits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FinalizerField {
    /// `metadata.finalizers`, on every object.
    Metadata,
    /// `spec.finalizers` of a Namespace, written through `namespaces/finalize`.
    Spec,
}

impl serde::Serialize for FinalizerField {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.path())
    }
}

impl<'de> serde::Deserialize<'de> for FinalizerField {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let path = String::deserialize(deserializer)?;
        [FinalizerField::Metadata, FinalizerField::Spec]
            .into_iter()
            .find(|f| f.path() == path)
            .ok_or_else(|| {
                serde::de::Error::unknown_variant(
                    &path,
                    &["metadata.finalizers", "spec.finalizers"],
                )
            })
    }
}

impl FinalizerField {
    pub fn path(self) -> &'static str {
        match self {
            FinalizerField::Metadata => "metadata.finalizers",
            FinalizerField::Spec => "spec.finalizers",
        }
    }

    /// The subresource a write of this list goes through: `finalize` for a
    /// Namespace's `spec.finalizers`, none (`""`) for `metadata.finalizers`.
    pub fn subresource(self) -> &'static str {
        match self {
            FinalizerField::Metadata => "",
            FinalizerField::Spec => "finalize",
        }
    }
}
