//! One error type for the operator; each variant says which pipeline step failed.

/// Operator errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading the resource or its related objects failed.
    #[error("observe {what}: {source}")]
    Observe {
        /// What was being read.
        what: String,
        /// The API error.
        source: kube::Error,
    },
    /// Rendering a child failed (a bug or an unserialisable value, not user input).
    #[error("render {what}: {message}")]
    Render {
        /// Which child.
        what: String,
        /// Why.
        message: String,
    },
    /// Server-side apply of a child failed.
    #[error("apply {what}: {source}")]
    Apply {
        /// Which child.
        what: String,
        /// The API error.
        source: kube::Error,
    },
    /// Listing or deleting children the spec no longer wants failed.
    #[error("prune {what}: {source}")]
    Prune {
        /// Which children.
        what: String,
        /// The API error.
        source: kube::Error,
    },
    /// Writing status failed.
    #[error("status of {what}: {source}")]
    Status {
        /// Which resource.
        what: String,
        /// The API error.
        source: kube::Error,
    },
    /// A cache the reconcile reads from was closed (the operator is stopping).
    #[error("the {0} cache is closed")]
    CacheClosed(&'static str),
    /// The object lacks a field the API server always sets (name, namespace, uid).
    #[error("object lacks metadata.{0}")]
    MissingMetadata(&'static str),
}

impl Error {
    /// Low-cardinality label for the failure metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Observe { .. } => "observe",
            Error::Render { .. } => "render",
            Error::Apply { .. } => "apply",
            Error::Prune { .. } => "prune",
            Error::Status { .. } => "status",
            Error::CacheClosed(_) => "observe",
            Error::MissingMetadata(_) => "metadata",
        }
    }
}

/// Result with the operator's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
