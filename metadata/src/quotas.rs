//! Client quotas (KIP-546's entities, Kafka's quota keys): what a quota
//! entity is, which stored quota applies to a connection (Kafka's
//! precedence of user and client-id quotas), and which filters match an
//! entity (DescribeClientQuotas). Pure functions over the image's quotas;
//! the controller validates alterations with [`validate_alteration`].

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const USER: &str = "user";
pub const CLIENT_ID: &str = "client-id";
pub const IP: &str = "ip";

pub const PRODUCER_BYTE_RATE: &str = "producer_byte_rate";
pub const CONSUMER_BYTE_RATE: &str = "consumer_byte_rate";
pub const REQUEST_PERCENTAGE: &str = "request_percentage";
pub const CONTROLLER_MUTATION_RATE: &str = "controller_mutation_rate";
pub const CONNECTION_CREATION_RATE: &str = "connection_creation_rate";

/// A quota's value: Kafka's double, compared by its bits (records are `Eq`).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
#[serde(transparent)]
pub struct QuotaValue(pub f64);

impl PartialEq for QuotaValue {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for QuotaValue {}

/// A quota entity: each entity type at most once, sorted by type; a name
/// of `None` is the type's default entity (`<default>` in Kafka's tools).
///
/// Read back (from the metadata log, a snapshot, or a request forwarded to
/// the controller) only in that form: a peer cannot hand the controller an
/// entity the request checks would have refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "Vec<(String, Option<String>)>")]
pub struct QuotaEntity(Vec<(String, Option<String>)>);

impl TryFrom<Vec<(String, Option<String>)>> for QuotaEntity {
    type Error = String;

    fn try_from(components: Vec<(String, Option<String>)>) -> Result<QuotaEntity, String> {
        let entity = QuotaEntity::new(components.clone())?;
        if entity.0 != components {
            return Err(format!(
                "quota entity {components:?} is not in its canonical form (each type once, sorted)"
            ));
        }
        Ok(entity)
    }
}

impl QuotaEntity {
    /// The entity of these components as an AlterClientQuotas entry names
    /// them, or why it is not one, with Kafka's messages (INVALID_REQUEST).
    /// A type named twice keeps its last name, as Kafka's request parsing
    /// does; an `ip` must be an address (Kafka also resolves host names).
    pub fn new(components: Vec<(String, Option<String>)>) -> Result<QuotaEntity, String> {
        let mut by_type: BTreeMap<String, Option<String>> = BTreeMap::new();
        for (t, n) in components {
            by_type.insert(t, n);
        }
        if by_type.is_empty() {
            return Err("Invalid empty client quota entity".into());
        }
        for (t, n) in &by_type {
            if ![USER, CLIENT_ID, IP].contains(&t.as_str()) {
                return Err(format!("Unhandled client quota entity type: {t}"));
            }
            if n.as_deref() == Some("") {
                return Err(format!("Empty {t} not supported"));
            }
        }
        if let Some(ip) = by_type.get(IP) {
            if by_type.len() > 1 {
                return Err("Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId".into());
            }
            if let Some(name) = ip {
                if name.parse::<std::net::IpAddr>().is_err() {
                    return Err(format!("{name} is not a valid IP or resolvable host."));
                }
            }
        }
        Ok(QuotaEntity(by_type.into_iter().collect()))
    }

    pub fn components(&self) -> &[(String, Option<String>)] {
        &self.0
    }

    /// This entity's component of `entity_type`: None if it has none,
    /// Some(None) for the default entity.
    pub fn get(&self, entity_type: &str) -> Option<Option<&str>> {
        self.0
            .iter()
            .find(|(t, _)| t == entity_type)
            .map(|(_, n)| n.as_deref())
    }

    fn is_ip(&self) -> bool {
        self.get(IP).is_some()
    }
}

/// The image's quotas: each entity's keys and values.
pub type ClientQuotas = BTreeMap<QuotaEntity, BTreeMap<String, QuotaValue>>;

/// A key's type in Kafka's quota config definitions.
#[derive(Clone, Copy, PartialEq, Eq)]
enum KeyType {
    Long,
    Int,
    Double,
}

/// The keys an entity takes (Kafka's QuotaConfig): byte rates, request
/// percentage and controller mutation rate for users and client ids, the
/// connection creation rate for IPs.
fn key_type(entity: &QuotaEntity, key: &str) -> Option<KeyType> {
    match (entity.is_ip(), key) {
        (false, PRODUCER_BYTE_RATE | CONSUMER_BYTE_RATE) => Some(KeyType::Long),
        (false, REQUEST_PERCENTAGE | CONTROLLER_MUTATION_RATE) => Some(KeyType::Double),
        (true, CONNECTION_CREATION_RATE) => Some(KeyType::Int),
        _ => None,
    }
}

/// One key's change in an alteration: a value to set, or None to remove.
pub type QuotaOp = (String, Option<f64>);

impl std::fmt::Display for QuotaEntity {
    /// As Kafka's ClientQuotaEntity prints itself (in its messages).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&display_entity(
            self.0.iter().map(|(t, n)| (t.as_str(), n.as_deref())),
        ))
    }
}

/// An entity's components as Kafka's ClientQuotaEntity prints them: its
/// small hash map's order (client-id, user, ip; checked against Kafka 4.4's
/// messages), a default entity's name as `null`.
pub fn display_entity<'a>(components: impl Iterator<Item = (&'a str, Option<&'a str>)>) -> String {
    let rank = |t: &str| match t {
        CLIENT_ID => 0,
        USER => 1,
        IP => 2,
        _ => 3,
    };
    let mut parts: Vec<(&str, Option<&str>)> = components.collect();
    parts.sort_by_key(|(t, _)| rank(t));
    let parts: Vec<String> = parts
        .iter()
        .map(|(t, n)| format!("{t}={}", n.unwrap_or("null")))
        .collect();
    format!("ClientQuotaEntity(entries={{{}}})", parts.join(", "))
}

/// Checks one entity's alteration as Kafka's controller does, with its
/// messages (INVALID_REQUEST): a key named twice refuses the entity; a
/// value set must suit the entity's keys, be finite and positive, fit its
/// type and be whole for integral keys. Removals are not checked (removing
/// what is not there changes nothing).
pub fn validate_alteration(entity: &QuotaEntity, ops: &[QuotaOp]) -> Result<(), String> {
    let mut keys: Vec<&str> = ops.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    if keys.windows(2).any(|w| w[0] == w[1]) {
        return Err(format!("Ignoring duplicate entity {entity}"));
    }
    let mut sets: Vec<(&str, f64)> = ops
        .iter()
        .filter_map(|(k, v)| v.map(|v| (k.as_str(), v)))
        .collect();
    sets.sort_by(|a, b| a.0.cmp(b.0));
    for (key, v) in sets {
        let Some(kind) = key_type(entity, key) else {
            return Err(format!("Invalid configuration key {key}"));
        };
        if !v.is_finite() {
            return Err(format!("Quota {key} must be a finite number"));
        }
        if v <= 0.0 {
            return Err(format!("Quota {key} must be greater than 0"));
        }
        match kind {
            KeyType::Long if v > i64::MAX as f64 => {
                return Err(format!("Proposed value for {key} is too large for a LONG."))
            }
            KeyType::Int if v > f64::from(i32::MAX) => {
                return Err(format!("Proposed value for {key} is too large for an INT."))
            }
            KeyType::Long | KeyType::Int if (v % 1.0).abs() > 1e-6 => {
                return Err(format!("{key} cannot be a fractional value."))
            }
            _ => {}
        }
    }
    Ok(())
}

/// A DescribeClientQuotas filter component: an exact name, the default
/// entity, or any entity of the type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MatchName {
    Exact(String),
    Default,
    Any,
}

/// Whether `entity` matches the filter: every component matches one of
/// the entity's; with `strict` the entity has no other components.
pub fn filter_matches(entity: &QuotaEntity, filter: &[(String, MatchName)], strict: bool) -> bool {
    let each = filter.iter().all(|(t, m)| match (entity.get(t), m) {
        (None, _) => false,
        (Some(_), MatchName::Any) => true,
        (Some(None), MatchName::Default) => true,
        (Some(Some(n)), MatchName::Exact(want)) => n == want,
        _ => false,
    });
    each && (!strict || entity.components().len() == filter.len())
}

/// Why a DescribeClientQuotas filter is refused: Kafka's code and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FilterError {
    /// INVALID_REQUEST.
    Invalid(String),
    /// UNSUPPORTED_VERSION (an entity type Kafka does not know).
    UnsupportedType(String),
}

/// A filter's components from the wire (type, match type, match string),
/// checked in request order as Kafka does.
pub fn parse_filter(
    components: &[(String, i8, Option<String>)],
) -> Result<Vec<(String, MatchName)>, FilterError> {
    let mut filter: Vec<(String, MatchName)> = Vec::with_capacity(components.len());
    for (t, match_type, name) in components {
        if t.is_empty() {
            return Err(FilterError::Invalid("Invalid empty entity type.".into()));
        }
        if filter.iter().any(|(seen, _)| seen == t) {
            return Err(FilterError::Invalid(format!(
                "Entity type {t} cannot appear more than once in the filter."
            )));
        }
        if ![USER, CLIENT_ID, IP].contains(&t.as_str()) {
            return Err(FilterError::UnsupportedType(format!(
                "Unsupported entity type {t}"
            )));
        }
        let m = match (match_type, name) {
            (0, Some(n)) => MatchName::Exact(n.clone()),
            (0, None) => {
                return Err(FilterError::Invalid(
                    "Request specified MATCH_TYPE_EXACT, but set match string to null.".into(),
                ))
            }
            (1, None) => MatchName::Default,
            (1, Some(_)) => {
                return Err(FilterError::Invalid(
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                        .into(),
                ))
            }
            (2, None) => MatchName::Any,
            (2, Some(_)) => {
                return Err(FilterError::Invalid(
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                        .into(),
                ))
            }
            (other, _) => return Err(FilterError::Invalid(format!("Unknown match type {other}"))),
        };
        filter.push((t.clone(), m));
    }
    if filter.iter().any(|(t, _)| t == IP) && filter.len() > 1 {
        return Err(FilterError::Invalid("Invalid entity filter component combination. IP filter component should not be used with user or clientId filter component.".into()));
    }
    Ok(filter)
}

/// Which quota applies to a connection of `user` with `client_id`, and the
/// tags its usage is counted under: Kafka's precedence, most specific
/// first. A default entity's quota is each user's (or client's) own, so the
/// tags name the actual user or client id where the entity has that type.
pub fn resolve(
    quotas: &ClientQuotas,
    user: &str,
    client_id: &str,
    key: &str,
) -> Option<(f64, QuotaTags)> {
    type Part<'a> = Option<Option<&'a str>>;
    let (u, c) = (Some(user), Some(client_id));
    let order: [(Part, Part); 8] = [
        (Some(u), Some(c)),
        (Some(u), Some(None)),
        (Some(u), None),
        (Some(None), Some(c)),
        (Some(None), Some(None)),
        (Some(None), None),
        (None, Some(c)),
        (None, Some(None)),
    ];
    for (user_part, client_part) in order {
        // Built as stored (sorted by type: client-id before user), not
        // checked: an empty client id names no stored entity, and the
        // lookup goes on to the next candidate.
        let mut components = Vec::new();
        if let Some(n) = client_part {
            components.push((CLIENT_ID.to_string(), n.map(str::to_string)));
        }
        if let Some(n) = user_part {
            components.push((USER.to_string(), n.map(str::to_string)));
        }
        let entity = QuotaEntity(components);
        if let Some(v) = quotas.get(&entity).and_then(|keys| keys.get(key)) {
            let tags = QuotaTags {
                user: user_part.map(|_| user.to_string()).unwrap_or_default(),
                client_id: client_part
                    .map(|_| client_id.to_string())
                    .unwrap_or_default(),
            };
            return Some((v.0, tags));
        }
    }
    None
}

/// Whose usage a quota counts (Kafka's sensor tags): an empty part is not
/// part of the quota's entity.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QuotaTags {
    pub user: String,
    pub client_id: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(parts: &[(&str, Option<&str>)]) -> QuotaEntity {
        QuotaEntity::new(
            parts
                .iter()
                .map(|(t, n)| (t.to_string(), n.map(str::to_string)))
                .collect(),
        )
        .unwrap()
    }

    /// An entity's components as a test writes them.
    type Parts<'a> = &'a [(&'a str, Option<&'a str>)];

    fn store(entries: &[(Parts, f64)]) -> ClientQuotas {
        let mut q = ClientQuotas::new();
        for (parts, v) in entries {
            q.entry(entity(parts))
                .or_default()
                .insert(PRODUCER_BYTE_RATE.into(), QuotaValue(*v));
        }
        q
    }

    #[test]
    fn the_most_specific_quota_applies() {
        let all: Vec<(Parts, f64)> = vec![
            (&[(USER, Some("alice")), (CLIENT_ID, Some("app"))], 1.0),
            (&[(USER, Some("alice")), (CLIENT_ID, None)], 2.0),
            (&[(USER, Some("alice"))], 3.0),
            (&[(USER, None), (CLIENT_ID, Some("app"))], 4.0),
            (&[(USER, None), (CLIENT_ID, None)], 5.0),
            (&[(USER, None)], 6.0),
            (&[(CLIENT_ID, Some("app"))], 7.0),
            (&[(CLIENT_ID, None)], 8.0),
        ];
        // Take the most specific away one at a time: the next one applies,
        // with the tags of its entity kind.
        let tags = [
            ("alice", "app"),
            ("alice", "app"),
            ("alice", ""),
            ("alice", "app"),
            ("alice", "app"),
            ("alice", ""),
            ("", "app"),
            ("", "app"),
        ];
        for skip in 0..all.len() {
            let q = store(&all[skip..]);
            let (v, t) = resolve(&q, "alice", "app", PRODUCER_BYTE_RATE).unwrap();
            assert_eq!(v, all[skip].1, "after removing {skip}");
            assert_eq!((t.user.as_str(), t.client_id.as_str()), tags[skip]);
        }
        assert_eq!(
            resolve(&ClientQuotas::new(), "alice", "app", PRODUCER_BYTE_RATE),
            None
        );
        // Another user's and another client's quotas do not apply.
        let q = store(&[
            (&[(USER, Some("bob"))], 1.0),
            (&[(CLIENT_ID, Some("other"))], 2.0),
        ]);
        assert_eq!(resolve(&q, "alice", "app", PRODUCER_BYTE_RATE), None);
        // Only the asked key.
        let q = store(&[(&[(USER, Some("alice"))], 1.0)]);
        assert_eq!(resolve(&q, "alice", "app", CONSUMER_BYTE_RATE), None);
        // A client without a client id still has its user's and the
        // defaults' quotas.
        let (v, t) = resolve(&q, "alice", "", PRODUCER_BYTE_RATE).unwrap();
        assert_eq!(
            (v, t.user.as_str(), t.client_id.as_str()),
            (1.0, "alice", "")
        );
        let q = store(&[(&[(CLIENT_ID, None)], 2.0)]);
        assert_eq!(
            resolve(&q, "alice", "", PRODUCER_BYTE_RATE).map(|r| r.0),
            Some(2.0)
        );
    }

    #[test]
    fn entities_are_kafkas() {
        let e = |parts: &[(&str, Option<&str>)]| {
            QuotaEntity::new(
                parts
                    .iter()
                    .map(|(t, n)| (t.to_string(), n.map(str::to_string)))
                    .collect(),
            )
        };
        let err = |parts: &[(&str, Option<&str>)]| e(parts).unwrap_err();
        assert_eq!(err(&[]), "Invalid empty client quota entity");
        assert_eq!(
            err(&[("group", Some("g"))]),
            "Unhandled client quota entity type: group"
        );
        assert_eq!(err(&[(USER, Some(""))]), "Empty user not supported");
        assert_eq!(
            err(&[(IP, Some("1.2.3.4")), (USER, Some("a"))]),
            "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
        );
        assert_eq!(
            err(&[(IP, Some("nonsense"))]),
            "nonsense is not a valid IP or resolvable host."
        );
        assert!(e(&[(IP, Some("::1"))]).is_ok() && e(&[(IP, None)]).is_ok());
        // A type named twice: the last name, as Kafka's parsing keeps.
        assert_eq!(
            e(&[(USER, Some("a")), (USER, Some("b"))]),
            e(&[(USER, Some("b"))])
        );
        assert_eq!(
            entity(&[(USER, Some("u")), (CLIENT_ID, None)]).to_string(),
            "ClientQuotaEntity(entries={client-id=null, user=u})"
        );
        // Order does not matter.
        assert_eq!(
            e(&[(CLIENT_ID, Some("c")), (USER, Some("u"))]),
            e(&[(USER, Some("u")), (CLIENT_ID, Some("c"))])
        );
    }

    #[test]
    fn alterations_take_the_entitys_keys_and_sound_values() {
        let user = entity(&[(USER, Some("u"))]);
        let ip = entity(&[(IP, None)]);
        let check = |e: &QuotaEntity, k: &str, v: Option<f64>| {
            validate_alteration(e, &[(k.to_string(), v)]).err()
        };
        let table: Vec<(&QuotaEntity, &str, Option<f64>, Option<&str>)> = vec![
            (&user, PRODUCER_BYTE_RATE, Some(1024.0), None),
            (&user, REQUEST_PERCENTAGE, Some(12.5), None),
            (&user, REQUEST_PERCENTAGE, Some(1e12), None),
            (&user, PRODUCER_BYTE_RATE, Some(1.0000001), None),
            // Removals are not checked.
            (&user, "bogus", None, None),
            (
                &user,
                PRODUCER_BYTE_RATE,
                Some(10.5),
                Some("producer_byte_rate cannot be a fractional value."),
            ),
            (
                &user,
                PRODUCER_BYTE_RATE,
                Some(0.0),
                Some("Quota producer_byte_rate must be greater than 0"),
            ),
            (
                &user,
                CONSUMER_BYTE_RATE,
                Some(-1.0),
                Some("Quota consumer_byte_rate must be greater than 0"),
            ),
            (
                &user,
                PRODUCER_BYTE_RATE,
                Some(f64::NAN),
                Some("Quota producer_byte_rate must be a finite number"),
            ),
            (
                &user,
                PRODUCER_BYTE_RATE,
                Some(1e19),
                Some("Proposed value for producer_byte_rate is too large for a LONG."),
            ),
            (
                &user,
                CONNECTION_CREATION_RATE,
                Some(1.0),
                Some("Invalid configuration key connection_creation_rate"),
            ),
            (
                &user,
                "unknown_rate",
                Some(1.0),
                Some("Invalid configuration key unknown_rate"),
            ),
            (&ip, CONNECTION_CREATION_RATE, Some(5.0), None),
            (
                &ip,
                CONNECTION_CREATION_RATE,
                Some(3e9),
                Some("Proposed value for connection_creation_rate is too large for an INT."),
            ),
            (
                &ip,
                PRODUCER_BYTE_RATE,
                Some(5.0),
                Some("Invalid configuration key producer_byte_rate"),
            ),
        ];
        for (e, k, v, want) in table {
            assert_eq!(check(e, k, v).as_deref(), want, "{e} {k} {v:?}");
        }
        let twice = [
            (PRODUCER_BYTE_RATE.to_string(), Some(1.0)),
            (PRODUCER_BYTE_RATE.to_string(), None),
        ];
        assert_eq!(
            validate_alteration(&user, &twice).unwrap_err(),
            "Ignoring duplicate entity ClientQuotaEntity(entries={user=u})"
        );
    }

    #[test]
    fn filters_match_as_kafkas() {
        let ua = entity(&[(USER, Some("a"))]);
        let uac = entity(&[(USER, Some("a")), (CLIENT_ID, Some("c"))]);
        let ud = entity(&[(USER, None)]);
        let f = |parts: &[(&str, MatchName)]| -> Vec<(String, MatchName)> {
            parts
                .iter()
                .map(|(t, m)| (t.to_string(), m.clone()))
                .collect()
        };
        let exact_a = f(&[(USER, MatchName::Exact("a".into()))]);
        assert!(filter_matches(&ua, &exact_a, false));
        assert!(filter_matches(&uac, &exact_a, false));
        assert!(!filter_matches(&uac, &exact_a, true));
        assert!(!filter_matches(&ud, &exact_a, false));
        let default = f(&[(USER, MatchName::Default)]);
        assert!(filter_matches(&ud, &default, true));
        assert!(!filter_matches(&ua, &default, false));
        let any = f(&[(USER, MatchName::Any)]);
        assert!(filter_matches(&ua, &any, false) && filter_matches(&ud, &any, false));
        assert!(!filter_matches(
            &entity(&[(CLIENT_ID, Some("c"))]),
            &any,
            false
        ));
        // An empty filter matches everything unless strict.
        assert!(filter_matches(&uac, &[], false));
        assert!(!filter_matches(&uac, &[], true));
        let parse = |c: &[(&str, i8, Option<&str>)]| {
            parse_filter(
                &c.iter()
                    .map(|(t, m, n)| (t.to_string(), *m, n.map(str::to_string)))
                    .collect::<Vec<_>>(),
            )
        };
        let invalid = |m: &str| Err(FilterError::Invalid(m.into()));
        assert_eq!(parse(&[(USER, 0, Some("a"))]), Ok(exact_a));
        assert_eq!(
            parse(&[("", 2, None)]),
            invalid("Invalid empty entity type.")
        );
        assert_eq!(
            parse(&[(USER, 2, None), (USER, 1, None)]),
            invalid("Entity type user cannot appear more than once in the filter.")
        );
        assert_eq!(
            parse(&[("group", 2, None)]),
            Err(FilterError::UnsupportedType(
                "Unsupported entity type group".into()
            ))
        );
        assert_eq!(
            parse(&[(USER, 0, None)]),
            invalid("Request specified MATCH_TYPE_EXACT, but set match string to null.")
        );
        assert_eq!(
            parse(&[(USER, 1, Some("a"))]),
            invalid("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
        );
        assert_eq!(
            parse(&[(USER, 2, Some("a"))]),
            invalid("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
        );
        assert_eq!(parse(&[(USER, 7, None)]), invalid("Unknown match type 7"));
        assert_eq!(
            parse(&[(IP, 2, None), (USER, 1, None)]),
            invalid("Invalid entity filter component combination. IP filter component should not be used with user or clientId filter component.")
        );
    }

    #[test]
    fn an_entity_is_read_back_only_in_its_checked_form() {
        let alice = QuotaEntity::new(vec![
            (USER.into(), Some("alice".into())),
            (CLIENT_ID.into(), None),
        ])
        .unwrap();
        let json = serde_json::to_string(&alice).unwrap();
        assert_eq!(serde_json::from_str::<QuotaEntity>(&json).unwrap(), alice);
        for bad in [
            r#"[]"#,
            r#"[["user","a"],["user","b"]]"#,
            r#"[["user","a"],["client-id",null]]"#,
            r#"[["user",""]]"#,
            r#"[["group","g"]]"#,
            r#"[["ip","127.0.0.1"],["user","a"]]"#,
            r#"[["ip","not-an-address"]]"#,
        ] {
            assert!(serde_json::from_str::<QuotaEntity>(bad).is_err(), "{bad}");
        }
    }
}
