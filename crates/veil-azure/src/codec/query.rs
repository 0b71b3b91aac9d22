//! Query strings as Azure reads them: names are case-insensitive (kept in lower case), values are
//! percent-decoded and a `+` stays a plus (the SDKs percent-encode everything that is not a URL-safe
//! character, and Shared Key signs the decoded values).

use percent_encoding::percent_decode_str;

/// The decoded parameters of one request, in the order given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

pub fn decode_component(text: &str) -> String {
    percent_decode_str(text).decode_utf8_lossy().into_owned()
}

impl Query {
    pub fn parse(raw: Option<&str>) -> Self {
        let pairs = raw
            .unwrap_or_default()
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                let mut name = decode_component(name);
                name.make_ascii_lowercase(); // in place: one string per name, not two
                (name, decode_component(value))
            })
            .collect();
        Self { pairs }
    }

    /// The first value of a parameter.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_case_insensitive_and_values_percent_decoded_with_plus_kept() {
        let q = Query::parse(Some("PopReceipt=a%2Bb+c&numofmessages=5&flag"));
        assert_eq!(q.get("popreceipt"), Some("a+b+c"));
        assert_eq!(q.get("numofmessages"), Some("5"));
        assert_eq!(q.get("flag"), Some(""));
        assert_eq!(q.get("missing"), None);
    }
}
