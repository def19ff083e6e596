//! Who a connection is: Kafka's `KafkaPrincipal` (`User:<name>`), from the
//! listener's security protocol as Kafka's `DefaultKafkaPrincipalBuilder`
//! builds it: the SASL user name on SASL listeners, the client
//! certificate's subject (through `ssl.principal.mapping.rules`) on SSL
//! listeners, `User:ANONYMOUS` otherwise.

use std::fmt;
use x509_parser::asn1_rs::ToDer;
use x509_parser::prelude::{FromDer, X509Certificate};

/// `User:ANONYMOUS`: PLAINTEXT, and SSL without a client certificate.
pub const ANONYMOUS: &str = "ANONYMOUS";

/// A principal of type `User`, the only type Kafka's builder makes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KafkaPrincipal {
    pub name: String,
}

impl KafkaPrincipal {
    pub fn user(name: impl Into<String>) -> KafkaPrincipal {
        KafkaPrincipal { name: name.into() }
    }

    pub fn anonymous() -> KafkaPrincipal {
        KafkaPrincipal::user(ANONYMOUS)
    }
}

impl fmt::Display for KafkaPrincipal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "User:{}", self.name)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrincipalError {
    #[error("client certificate could not be parsed: {0}")]
    Certificate(String),
    #[error("No rules apply to {0}, rules [{1}]")]
    NoRule(String, String),
    #[error("invalid ssl.principal.mapping.rules: {0}")]
    Rules(String),
}

/// The subject of a DER certificate as Java's `X500Principal.getName()`
/// writes it (RFC 2253): the most specific RDN first, `,` between RDNs and
/// `+` inside one, the RFC's keywords and other attributes as
/// `<oid>=#<hex of the value's DER>`.
pub fn subject_dn(der: &[u8]) -> Result<String, PrincipalError> {
    let (_, cert) =
        X509Certificate::from_der(der).map_err(|e| PrincipalError::Certificate(e.to_string()))?;
    let mut rdns = Vec::new();
    for rdn in cert.subject().iter() {
        let mut parts = Vec::new();
        for atv in rdn.iter() {
            let oid = atv.attr_type().to_id_string();
            let keyword = match oid.as_str() {
                "2.5.4.3" => Some("CN"),
                "2.5.4.7" => Some("L"),
                "2.5.4.8" => Some("ST"),
                "2.5.4.10" => Some("O"),
                "2.5.4.11" => Some("OU"),
                "2.5.4.6" => Some("C"),
                "2.5.4.9" => Some("STREET"),
                "0.9.2342.19200300.100.1.25" => Some("DC"),
                "0.9.2342.19200300.100.1.1" => Some("UID"),
                _ => None,
            };
            match (keyword, atv.as_str()) {
                (Some(k), Ok(value)) => parts.push(format!("{k}={}", escape_rfc2253(value))),
                _ => {
                    let raw = atv.attr_value().to_der_vec().unwrap_or_default();
                    let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
                    parts.push(format!("{oid}=#{hex}"));
                }
            }
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    Ok(rdns.join(","))
}

fn escape_rfc2253(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// One rule of `ssl.principal.mapping.rules`.
#[derive(Clone, Debug)]
enum Rule {
    Default,
    /// `RULE:<pattern>/<replacement>/[L|U]`: applies when the pattern
    /// matches the whole DN.
    Replace {
        pattern: regex::Regex,
        replacement: String,
        case: Option<char>,
    },
}

/// Kafka's `SslPrincipalMapper`: the first rule that applies names the user.
#[derive(Clone, Debug)]
pub struct SslPrincipalMapper {
    rules: Vec<Rule>,
    text: String,
}

impl SslPrincipalMapper {
    /// Parses the setting (`DEFAULT` by default): rules separated by `,`
    /// outside a rule's pattern; `\/` inside a pattern or replacement is a
    /// slash.
    pub fn parse(rules: &str) -> Result<SslPrincipalMapper, PrincipalError> {
        let mut out = Vec::new();
        let mut rest = rules.trim();
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("DEFAULT") {
                out.push(Rule::Default);
                rest = after;
            } else if let Some(after) = rest.strip_prefix("RULE:") {
                let (pattern, after) = split_unescaped_slash(after).ok_or_else(|| {
                    PrincipalError::Rules(format!("no '/' after the pattern in {rest}"))
                })?;
                let (replacement, after) = split_unescaped_slash(after).ok_or_else(|| {
                    PrincipalError::Rules(format!("no '/' after the replacement in {rest}"))
                })?;
                let (case, after) = match after.chars().next() {
                    Some(c @ ('L' | 'U')) => (Some(c), &after[1..]),
                    _ => (None, after),
                };
                let anchored = format!("^(?:{pattern})$");
                let pattern = regex::Regex::new(&anchored)
                    .map_err(|e| PrincipalError::Rules(format!("pattern {pattern}: {e}")))?;
                out.push(Rule::Replace {
                    pattern,
                    replacement: replacement.replace("\\/", "/"),
                    case,
                });
                rest = after;
            } else {
                return Err(PrincipalError::Rules(format!("unexpected '{rest}'")));
            }
            rest = rest.trim_start();
            match rest.strip_prefix(',') {
                Some(after) => rest = after.trim_start(),
                None if rest.is_empty() => {}
                None => {
                    return Err(PrincipalError::Rules(format!(
                        "expected ',' before '{rest}'"
                    )))
                }
            }
        }
        if out.is_empty() {
            out.push(Rule::Default);
        }
        Ok(SslPrincipalMapper {
            rules: out,
            text: rules.trim().to_string(),
        })
    }

    /// The user name for certificate subject `dn`.
    pub fn user_name(&self, dn: &str) -> Result<String, PrincipalError> {
        for rule in &self.rules {
            match rule {
                Rule::Default => return Ok(dn.to_string()),
                Rule::Replace {
                    pattern,
                    replacement,
                    case,
                } => {
                    if !pattern.is_match(dn) {
                        continue;
                    }
                    let name = pattern
                        .replace(dn, java_replacement(replacement))
                        .into_owned();
                    return Ok(match case {
                        Some('L') => name.to_lowercase(),
                        Some('U') => name.to_uppercase(),
                        _ => name,
                    });
                }
            }
        }
        Err(PrincipalError::NoRule(dn.to_string(), self.text.clone()))
    }
}

/// Java writes group references `$1`; the regex crate reads `$1x` as a
/// group named `1x`, so each is braced.
fn java_replacement(replacement: &str) -> String {
    let mut out = String::with_capacity(replacement.len() + 4);
    let mut chars = replacement.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '$' if chars.peek().is_some_and(|d| d.is_ascii_digit()) => {
                out.push_str("${");
                while let Some(d) = chars.peek().copied().filter(char::is_ascii_digit) {
                    out.push(d);
                    chars.next();
                }
                out.push('}');
            }
            '$' => out.push_str("$$"),
            '\\' => {
                if let Some(n) = chars.next() {
                    if n == '$' {
                        out.push_str("$$");
                    } else {
                        out.push(n);
                    }
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Splits at the first `/` not preceded by `\`.
fn split_unescaped_slash(s: &str) -> Option<(&str, &str)> {
    let bytes = s.as_bytes();
    (0..bytes.len())
        .find(|&i| bytes[i] == b'/' && (i == 0 || bytes[i - 1] != b'\\'))
        .map(|i| (&s[..i], &s[i + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's documented examples of `ssl.principal.mapping.rules`.
    #[test]
    fn mapping_rules_table() {
        let rules = "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,DEFAULT";
        let m = SslPrincipalMapper::parse(rules).unwrap();
        for (dn, user) in [
            (
                "CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown",
                "serviceuser",
            ),
            (
                "CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown",
                "adminuser@admin",
            ),
            ("OU=x,cn=Some.Name", "some.name"),
            ("O=nobody", "O=nobody"),
        ] {
            assert_eq!(m.user_name(dn).unwrap(), user, "{dn}");
        }
        let upper = SslPrincipalMapper::parse("RULE:^CN=([^,]*).*$/$1x/U").unwrap();
        assert_eq!(upper.user_name("CN=bob,O=o").unwrap(), "BOBX");
        assert!(matches!(
            upper.user_name("O=o"),
            Err(PrincipalError::NoRule(..))
        ));
        let slash = SslPrincipalMapper::parse(r"RULE:^CN=(.*)$/svc\/$1/").unwrap();
        assert_eq!(slash.user_name("CN=a").unwrap(), "svc/a");
        assert_eq!(
            SslPrincipalMapper::parse("DEFAULT")
                .unwrap()
                .user_name("CN=a,O=b")
                .unwrap(),
            "CN=a,O=b"
        );
        for bad in [
            "RULE:^CN=(.*)$",
            "RULE:^CN=(.*)$/$1",
            "RULE:(/x/",
            "DEFAULT DEFAULT",
            "NOPE",
        ] {
            assert!(SslPrincipalMapper::parse(bad).is_err(), "{bad}");
        }
    }

    /// The subject as Java prints it: most specific first, no spaces.
    #[test]
    fn subject_of_a_certificate() {
        use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec![]).unwrap();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CountryName, "US");
        dn.push(DnType::OrganizationName, "Strand, Inc");
        dn.push(DnType::OrganizationalUnitName, "Eng");
        dn.push(DnType::CommonName, "alice");
        params.distinguished_name = dn;
        let cert = params.self_signed(&key).unwrap();
        assert_eq!(
            subject_dn(cert.der()).unwrap(),
            r"CN=alice,OU=Eng,O=Strand\, Inc,C=US"
        );
        assert!(subject_dn(b"not a certificate").is_err());
    }

    #[test]
    fn rfc2253_escapes() {
        assert_eq!(escape_rfc2253("a,b+c"), r"a\,b\+c");
        assert_eq!(escape_rfc2253(" #x "), r"\ #x\ ");
        assert_eq!(escape_rfc2253("#x"), r"\#x");
    }
}
