//! Kafka's topic-name rule, checked by the controller before it creates a
//! topic and by brokers before they auto-create or answer for one.

/// The metadata log's name, reserved as in Kafka.
pub const METADATA_TOPIC: &str = "__cluster_metadata";

pub const MAX_TOPIC_NAME_LEN: usize = 249;

/// Why a topic name is refused; each maps to INVALID_TOPIC_EXCEPTION at the
/// edge, with this text as the message Kafka would give.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicNameError {
    #[error("Topic name is illegal, it can't be empty")]
    Empty,
    #[error("Topic name cannot be \".\" or \"..\"")]
    Dots,
    #[error("Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LEN} characters, topic name: {0}")]
    TooLong(String),
    #[error("Topic name {0} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'")]
    BadCharacter(String),
}

/// Kafka's topic name rule: 1..=249 chars of [a-zA-Z0-9._-], not "." or "..".
pub fn validate_topic_name(name: &str) -> Result<(), TopicNameError> {
    if name.is_empty() {
        return Err(TopicNameError::Empty);
    }
    if name == "." || name == ".." {
        return Err(TopicNameError::Dots);
    }
    if name.len() > MAX_TOPIC_NAME_LEN {
        return Err(TopicNameError::TooLong(name.to_string()));
    }
    if !name
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'_' || c == b'-')
    {
        return Err(TopicNameError::BadCharacter(name.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_name_rules() {
        let cases = [
            ("ok.topic_1-x", true),
            ("", false),
            (".", false),
            ("..", false),
            ("a b", false),
            ("ä", false),
            (&"x".repeat(249), true),
            (&"x".repeat(250), false),
        ];
        for (name, ok) in cases {
            assert_eq!(validate_topic_name(name).is_ok(), ok, "{name:?}");
        }
    }
}
