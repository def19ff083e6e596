//! Decoding one request frame (the bytes after the size prefix) as the
//! server does before dispatching it: the API key and version are checked
//! against the versions Strand serves, then the header and the body are
//! decoded. Pure, so it can be fuzzed and table-tested apart from the I/O.

use crate::api::is_served;
use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind};
use kafka_protocol::protocol::Decodable;

/// A decoded frame.
// Returned once per request and taken apart at once: boxing the request
// would only add an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Decoded {
    Request {
        key: ApiKey,
        version: i16,
        header: RequestHeader,
        request: RequestKind,
    },
    /// ApiVersions at a version Strand does not serve: KIP-511 asks for a v0
    /// UNSUPPORTED_VERSION answer listing the served ranges.
    UnsupportedApiVersions { correlation_id: i32 },
}

/// Why a frame cannot be served; the connection is closed, as Kafka does.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RequestError {
    #[error("frame of {0} bytes is shorter than a request header")]
    TooShort(usize),
    #[error("unknown api key {0}")]
    UnknownApiKey(i16),
    #[error("unsupported version {version} of {key:?}")]
    UnsupportedVersion { key: ApiKey, version: i16 },
    #[error("bad request header: {0}")]
    Header(String),
    #[error("malformed {key:?} v{version}: {reason}")]
    Body {
        key: ApiKey,
        version: i16,
        reason: String,
    },
}

/// Decodes one request frame.
pub fn decode_request(mut frame: Bytes) -> Result<Decoded, RequestError> {
    if frame.len() < 8 {
        return Err(RequestError::TooShort(frame.len()));
    }
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let key = ApiKey::try_from(api_key).map_err(|_| RequestError::UnknownApiKey(api_key))?;
    if !is_served(key, version) {
        return if key == ApiKey::ApiVersions {
            Ok(Decoded::UnsupportedApiVersions { correlation_id })
        } else {
            Err(RequestError::UnsupportedVersion { key, version })
        };
    }
    let header = RequestHeader::decode(&mut frame, key.request_header_version(version))
        .map_err(|e| RequestError::Header(e.to_string()))?;
    let request =
        RequestKind::decode(key, &mut frame, version).map_err(|e| RequestError::Body {
            key,
            version,
            reason: e.to_string(),
        })?;
    Ok(Decoded::Request {
        key,
        version,
        header,
        request,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::ApiVersionsRequest;
    use kafka_protocol::protocol::Encodable;

    fn frame(key: i16, version: i16, body: &[u8]) -> Bytes {
        let mut f = BytesMut::new();
        f.extend_from_slice(&key.to_be_bytes());
        f.extend_from_slice(&version.to_be_bytes());
        f.extend_from_slice(&7i32.to_be_bytes());
        f.extend_from_slice(body);
        f.freeze()
    }

    #[test]
    fn decisions() {
        assert_eq!(
            decode_request(Bytes::from_static(&[0, 18])).unwrap_err(),
            RequestError::TooShort(2)
        );
        assert_eq!(
            decode_request(frame(-7, 0, &[])).unwrap_err(),
            RequestError::UnknownApiKey(-7)
        );
        assert!(matches!(
            decode_request(frame(18, 99, &[])),
            Ok(Decoded::UnsupportedApiVersions { correlation_id: 7 })
        ));
        assert!(matches!(
            decode_request(frame(0, 99, &[])),
            Err(RequestError::UnsupportedVersion {
                key: ApiKey::Produce,
                version: 99
            })
        ));
        // ApiVersions v3: header v2 (client id, tagged fields), then the body.
        let mut body = BytesMut::new();
        body.extend_from_slice(&(-1i16).to_be_bytes()); // null client id
        body.extend_from_slice(&[0]); // no tagged fields
        ApiVersionsRequest::default().encode(&mut body, 3).unwrap();
        match decode_request(frame(18, 3, &body)).unwrap() {
            Decoded::Request {
                key,
                version,
                header,
                ..
            } => {
                assert_eq!(
                    (key, version, header.correlation_id),
                    (ApiKey::ApiVersions, 3, 7)
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            decode_request(frame(18, 3, &body[..2])),
            Err(RequestError::Header(_))
        ));
    }
}
