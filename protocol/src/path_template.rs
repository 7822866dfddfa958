//! HTTP path templates such as `/orders/{id}/items/{item}`: the one parser the operator's validation
//! and the router sidecar's routing both use, so a template the operator accepts is one the sidecar
//! serves, with the same parameter names.
//!
//! Pure. A template starts with `/`; a parameter is a whole segment `{name}` with a name of
//! `[A-Za-z_][A-Za-z0-9_]*`, at most once per template; at most [`MAX_SEGMENTS`] segments.

/// Most segments a template (and so a routed request path) may have.
pub const MAX_SEGMENTS: usize = 32;

/// One segment of a template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// Must equal the request's segment.
    Literal(String),
    /// Captures one non-empty segment under this name.
    Param(String),
}

/// A parsed path template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathTemplate {
    /// The segments after the leading `/`, in order.
    pub segments: Vec<Segment>,
}

/// Why a template is refused; the message names the segment and the rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// The template does not start with `/`.
    #[error("path {0:?} must start with '/'")]
    NoLeadingSlash(String),
    /// Braces that are not a whole `{name}` segment.
    #[error("segment {0:?}: a parameter must be a whole segment such as {{id}}")]
    PartialParam(String),
    /// A parameter name outside `[A-Za-z_][A-Za-z0-9_]*`.
    #[error(
        "parameter {{{0}}} needs a name of letters, digits and '_' (not starting with a digit)"
    )]
    BadName(String),
    /// The same parameter twice.
    #[error("parameter {{{0}}} appears twice")]
    Duplicate(String),
    /// More than [`MAX_SEGMENTS`] segments.
    #[error("the path has more than {MAX_SEGMENTS} segments")]
    TooLong,
}

impl PathTemplate {
    /// The parameter names, in order.
    pub fn params(&self) -> impl Iterator<Item = &str> {
        self.segments.iter().filter_map(|s| match s {
            Segment::Param(name) => Some(name.as_str()),
            Segment::Literal(_) => None,
        })
    }

    /// The template with every parameter written `{}`: two routes of one method with the same shape
    /// match the same requests.
    pub fn shape(&self) -> String {
        let mut shape = String::new();
        for s in &self.segments {
            shape.push('/');
            match s {
                Segment::Literal(l) => shape.push_str(l),
                Segment::Param(_) => shape.push_str("{}"),
            }
        }
        shape
    }
}

fn valid_name(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Parses a template.
pub fn parse(path: &str) -> Result<PathTemplate, TemplateError> {
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| TemplateError::NoLeadingSlash(path.to_owned()))?;
    let mut segments = Vec::new();
    for segment in rest.split('/') {
        if segments.len() == MAX_SEGMENTS {
            return Err(TemplateError::TooLong);
        }
        match segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            Some(name) if !name.contains(['{', '}']) => {
                if !valid_name(name) {
                    return Err(TemplateError::BadName(name.to_owned()));
                }
                if segments
                    .iter()
                    .any(|s| matches!(s, Segment::Param(n) if n == name))
                {
                    return Err(TemplateError::Duplicate(name.to_owned()));
                }
                segments.push(Segment::Param(name.to_owned()));
            }
            _ if segment.contains(['{', '}']) => {
                return Err(TemplateError::PartialParam(segment.to_owned()));
            }
            _ => segments.push(Segment::Literal(segment.to_owned())),
        }
    }
    Ok(PathTemplate { segments })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_params_and_shape() {
        let t = parse("/orders/{id}/items/{item_2}").expect("valid");
        assert_eq!(t.params().collect::<Vec<_>>(), ["id", "item_2"]);
        assert_eq!(t.shape(), "/orders/{}/items/{}");
        assert_eq!(
            parse("/noop").expect("valid").segments,
            [Segment::Literal("noop".into())]
        );
    }

    #[test]
    fn different_names_same_shape() {
        assert_eq!(
            parse("/a/{x}").expect("x").shape(),
            parse("/a/{y}").expect("y").shape()
        );
    }

    #[test]
    fn rejects_partial_and_bad_params() {
        let cases = [
            ("/a/x{id}", TemplateError::PartialParam("x{id}".into())),
            ("/a/{}", TemplateError::BadName(String::new())),
            ("/a/{1x}", TemplateError::BadName("1x".into())),
            ("/a/{a-b}", TemplateError::BadName("a-b".into())),
            ("/a/{id}/{id}", TemplateError::Duplicate("id".into())),
            ("/a/{id", TemplateError::PartialParam("{id".into())),
            ("/a/{{id}}", TemplateError::PartialParam("{{id}}".into())),
            ("a", TemplateError::NoLeadingSlash("a".into())),
        ];
        for (bad, want) in cases {
            assert_eq!(parse(bad), Err(want), "{bad}");
        }
        assert_eq!(parse(&"/a".repeat(33)), Err(TemplateError::TooLong));
        assert!(parse(&"/a".repeat(32)).is_ok());
    }

    #[test]
    fn messages_name_the_segment() {
        let e = parse("/b/x{id}").expect_err("partial");
        assert_eq!(
            e.to_string(),
            "segment \"x{id}\": a parameter must be a whole segment such as {id}"
        );
    }
}
