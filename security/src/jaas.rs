//! Kafka's `sasl.jaas.config` value: one login module entry,
//! `<class> <flag> key="value" ... ;`, as brokers configure per listener
//! and mechanism (`listener.name.<listener>.<mechanism>.sasl.jaas.config`).
//! Values are quoted (`"..."`, with `\"` and `\\` escapes) or bare words.

use std::collections::BTreeMap;

/// One login module entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JaasEntry {
    /// The login module's class (`org.apache.kafka.common.security.plain.PlainLoginModule`).
    pub module: String,
    /// `required`, `requisite`, `sufficient` or `optional`.
    pub flag: String,
    pub options: BTreeMap<String, String>,
}

impl JaasEntry {
    /// The users a PLAIN login module accepts: options `user_<name>="<password>"`.
    pub fn plain_users(&self) -> BTreeMap<String, String> {
        self.options
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix("user_")?.to_string(), v.clone())))
            .filter(|(k, _)| !k.is_empty())
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid JAAS configuration: {0}")]
pub struct JaasError(pub String);

const FLAGS: [&str; 4] = ["required", "requisite", "sufficient", "optional"];

/// Parses a `sasl.jaas.config` value holding exactly one entry (as Kafka
/// requires of the property form).
pub fn parse(value: &str) -> Result<JaasEntry, JaasError> {
    let err = |m: &str| JaasError(m.to_string());
    let mut chars = value.trim().chars().peekable();
    let word = |chars: &mut std::iter::Peekable<std::str::Chars>| -> String {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut w = String::new();
        while let Some(c) = chars.peek().copied() {
            if c.is_whitespace() || c == ';' || c == '=' {
                break;
            }
            w.push(c);
            chars.next();
        }
        w
    };
    let module = word(&mut chars);
    if module.is_empty() {
        return Err(err("expected a login module class"));
    }
    let flag = word(&mut chars);
    if !FLAGS.contains(&flag.to_ascii_lowercase().as_str()) {
        return Err(JaasError(format!(
            "login module control flag '{flag}' is not one of {FLAGS:?}"
        )));
    }
    let mut options = BTreeMap::new();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        match chars.peek() {
            None => return Err(err("expected ';' at the end of the entry")),
            Some(';') => {
                chars.next();
                if chars.any(|c| !c.is_whitespace()) {
                    return Err(err("expected exactly one login module entry"));
                }
                break;
            }
            Some(_) => {}
        }
        let key = word(&mut chars);
        if key.is_empty() || chars.next() != Some('=') {
            return Err(JaasError(format!("expected key=value, found '{key}'")));
        }
        let value = if chars.peek() == Some(&'"') {
            chars.next();
            let mut v = String::new();
            loop {
                match chars.next() {
                    None => return Err(err("unterminated quoted value")),
                    Some('"') => break,
                    Some('\\') => match chars.next() {
                        Some(c) => v.push(c),
                        None => return Err(err("unterminated quoted value")),
                    },
                    Some(c) => v.push(c),
                }
            }
            v
        } else {
            let v = word(&mut chars);
            if v.is_empty() {
                return Err(JaasError(format!("no value for option {key}")));
            }
            v
        };
        options.insert(key, value);
    }
    Ok(JaasEntry {
        module,
        flag,
        options,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_documented_entries_parse() {
        let e = parse(
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice secret";"#,
        )
        .unwrap();
        assert_eq!(
            e.module,
            "org.apache.kafka.common.security.plain.PlainLoginModule"
        );
        assert_eq!(e.flag, "required");
        assert_eq!(e.options["username"], "admin");
        assert_eq!(e.options["password"], "admin-secret");
        let users = e.plain_users();
        assert_eq!(users.len(), 2);
        assert_eq!(users["alice"], "alice secret");
        let e = parse("org.apache.kafka.common.security.scram.ScramLoginModule required username=broker password=\"p\\\"w\";").unwrap();
        assert_eq!(e.options["username"], "broker");
        assert_eq!(e.options["password"], "p\"w");
        assert!(parse("X required;").unwrap().options.is_empty());
    }

    #[test]
    fn malformed_entries_are_refused() {
        for bad in [
            "",
            "X",
            "X required",
            "X mandatory a=1;",
            "X required a=1",
            "X required a;",
            "X required a=\"open;",
            "X required a=1; Y required b=2;",
            "X required =1;",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
    }
}
