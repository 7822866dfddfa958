//! Pure checks of what the CRD schema and its CEL rules cannot express. An invalid spec is reported in
//! status (Degraded, reason InvalidSpec) with the field path; it never breaks the watch.

pub mod manager;
pub(crate) mod memory;
pub mod router;
pub mod template;

use std::fmt;

/// One problem, named by its field path the way the API server names them (`spec.routes[1].http`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// Field path.
    pub field: String,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl FieldError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Joins problems into one status message.
pub(crate) fn summary(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

pub(crate) fn check_name(name: &str, out: &mut Vec<FieldError>) {
    let max = crate::render::meta::MAX_NAME_LEN;
    if name.len() > max {
        out.push(FieldError::new(
            "metadata.name",
            format!("must be at most {max} characters so the names of its Services stay valid DNS labels"),
        ));
    }
}
