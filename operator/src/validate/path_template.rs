//! HTTP path templates such as `/orders/{id}/items/{item}`.

/// A parsed path template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathTemplate {
    /// Parameter names, in order.
    pub params: Vec<String>,
    /// The template with every parameter replaced by `{}`: two routes with the same shape conflict.
    pub shape: String,
}

/// Parses a template; a parameter must be a whole segment `{name}` with a name of `[A-Za-z_][A-Za-z0-9_]*`.
pub fn parse(path: &str) -> Result<PathTemplate, String> {
    let mut params: Vec<String> = Vec::new();
    let mut shape = String::new();
    for segment in path.split('/').skip(1) {
        shape.push('/');
        if let Some(inner) = segment.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            let valid = inner
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && inner.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(format!(
                    "parameter {{{inner}}} needs a name of letters, digits and '_'"
                ));
            }
            if params.iter().any(|p| p == inner) {
                return Err(format!("parameter {{{inner}}} appears twice"));
            }
            params.push(inner.to_owned());
            shape.push_str("{}");
        } else if segment.contains(['{', '}']) {
            return Err(format!(
                "segment {segment:?}: a parameter must be a whole segment such as {{id}}"
            ));
        } else {
            shape.push_str(segment);
        }
    }
    Ok(PathTemplate { params, shape })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_params_and_shape() {
        let t = parse("/orders/{id}/items/{item_2}").expect("valid");
        assert_eq!(t.params, ["id", "item_2"]);
        assert_eq!(t.shape, "/orders/{}/items/{}");
    }

    #[test]
    fn different_names_same_shape() {
        assert_eq!(
            parse("/a/{x}").expect("x").shape,
            parse("/a/{y}").expect("y").shape
        );
    }

    #[test]
    fn rejects_partial_and_bad_params() {
        for bad in ["/a/x{id}", "/a/{}", "/a/{1x}", "/a/{id}/{id}", "/a/{id"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
