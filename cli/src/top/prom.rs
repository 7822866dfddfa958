//! The Prometheus text exposition format, as far as `switchyard top` reads it: samples with their
//! labels; comments, `# HELP`/`# TYPE` and timestamps are skipped. Pure.

/// One sample line.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Metric name, e.g. `switchyard_requests_total`.
    pub name: String,
    /// Label pairs in the order given.
    pub labels: Vec<(String, String)>,
    /// The value (`+Inf`, `-Inf` and `NaN` included).
    pub value: f64,
}

impl Sample {
    /// A label's value.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Every sample of `text`; a line that does not parse is an error naming its number.
pub fn parse(text: &str) -> Result<Vec<Sample>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|(i, l)| line(l.trim()).map_err(|e| format!("line {}: {e}: {l:?}", i + 1)))
        .collect()
}

fn line(l: &str) -> Result<Sample, String> {
    let name_end = l
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or("no value")?;
    let name = l[..name_end].to_owned();
    let mut rest = &l[name_end..];
    let mut labels = Vec::new();
    if let Some(body) = rest.strip_prefix('{') {
        let (pairs, after) = label_pairs(body)?;
        labels = pairs;
        rest = after;
    }
    let value = rest.split_whitespace().next().ok_or("no value")?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v
            .parse()
            .map_err(|_| format!("value {v:?} is not a number"))?,
    };
    Ok(Sample {
        name,
        labels,
        value,
    })
}

/// Label pairs in order.
type Labels = Vec<(String, String)>;

/// `a="x",b="y"}` -> the pairs and what follows the `}`.
fn label_pairs(mut s: &str) -> Result<(Labels, &str), String> {
    let mut out = Vec::new();
    loop {
        s = s.trim_start_matches([',', ' ']);
        if let Some(after) = s.strip_prefix('}') {
            return Ok((out, after));
        }
        let eq = s.find('=').ok_or("label without =")?;
        let key = s[..eq].trim().to_owned();
        s = s[eq + 1..]
            .strip_prefix('"')
            .ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            match chars.next() {
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return Err("unterminated escape".into()),
                },
                Some((_, c)) => value.push(c),
                None => return Err("unterminated label value".into()),
            }
        };
        out.push((key, value));
        s = &s[end + 1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_samples_labels_and_special_values() {
        let text = "# HELP x y\n# TYPE switchyard_requests counter\n\
            switchyard_requests_total{event=\"noop\",status=\"200\"} 12\n\
            switchyard_in_flight 3\n\
            h_bucket{event=\"a \\\"b\\\"\",le=\"+Inf\"} 4 1700000000\n\
            weird{le=\"0.1\"} +Inf\n";
        let s = parse(text).expect("parses");
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].name, "switchyard_requests_total");
        assert_eq!(s[0].label("status"), Some("200"));
        assert_eq!(s[0].value, 12.0);
        assert_eq!(s[1].labels, vec![]);
        assert_eq!(s[2].label("event"), Some("a \"b\""));
        assert_eq!(s[2].value, 4.0);
        assert!(s[3].value.is_infinite());
        let e = parse("ok 1\nbroken{a=b} 1\n").expect_err("unquoted");
        assert!(e.starts_with("line 2"), "{e}");
        assert!(parse("x notanumber").is_err());
    }
}
