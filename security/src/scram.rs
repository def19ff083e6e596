//! The server side of SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677)
//! as Kafka speaks it: no channel binding (`n,,`), an authorization id only
//! if it is the user name, and the stored credential of KIP-554 (salt,
//! iterations, StoredKey, ServerKey; never the password).
//!
//! Pure: the caller supplies the server nonce (random bytes at the edge)
//! and looks the credential up; [`ScramServer`] only parses, computes and
//! decides. Two steps: the client-first message gets the server-first
//! message, the client-final message gets the server-final message and the
//! authenticated user, or an error (SASL_AUTHENTICATION_FAILED at the edge).

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

/// Kafka's bounds on a SCRAM credential's iteration count.
pub const MIN_ITERATIONS: u32 = 4096;
pub const MAX_ITERATIONS: u32 = 16384;

/// The two SCRAM mechanisms Kafka offers (KIP-554's type codes 1 and 2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Mechanism {
    Sha256,
    Sha512,
}

impl Mechanism {
    pub const ALL: [Mechanism; 2] = [Mechanism::Sha256, Mechanism::Sha512];

    /// The SASL mechanism name.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Sha256 => "SCRAM-SHA-256",
            Mechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// The `mechanism` code of Describe/AlterUserScramCredentials.
    pub fn wire(self) -> i8 {
        match self {
            Mechanism::Sha256 => 1,
            Mechanism::Sha512 => 2,
        }
    }

    pub fn from_wire(code: i8) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.wire() == code)
    }

    fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
            // HMAC takes a key of any length: `new_from_slice` cannot fail.
            let mut mac = <M as hmac::digest::KeyInit>::new_from_slice(key)
                .expect("HMAC accepts keys of any length");
            for p in parts {
                mac.update(p);
            }
            mac.finalize().into_bytes().to_vec()
        }
        match self {
            Mechanism::Sha256 => run::<Hmac<Sha256>>(key, parts),
            Mechanism::Sha512 => run::<Hmac<Sha512>>(key, parts),
        }
    }

    fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => Sha256::digest(data).to_vec(),
            Mechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// The client's ClientProof and the ServerSignature it expects, for
    /// `auth_message` (RFC 5802, section 3).
    fn proof_and_signature(
        self,
        salted_password: &[u8],
        auth_message: &[u8],
    ) -> (Vec<u8>, Vec<u8>) {
        let client_key = self.hmac(salted_password, &[b"Client Key"]);
        let stored_key = self.hash(&client_key);
        let signature = self.hmac(&stored_key, &[auth_message]);
        let proof = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = self.hmac(salted_password, &[b"Server Key"]);
        (proof, self.hmac(&server_key, &[auth_message]))
    }

    /// Hi(password, salt, i) of RFC 5802: PBKDF2 with this HMAC.
    fn salted_password(self, password: &[u8], salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            Mechanism::Sha256 => {
                pbkdf2::pbkdf2_hmac_array::<Sha256, 32>(password, salt, iterations).to_vec()
            }
            Mechanism::Sha512 => {
                pbkdf2::pbkdf2_hmac_array::<Sha512, 64>(password, salt, iterations).to_vec()
            }
        }
    }
}

/// What the server keeps for a user and mechanism (KIP-554).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScramCredential {
    pub mechanism: Mechanism,
    pub salt: Vec<u8>,
    pub iterations: u32,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
}

impl ScramCredential {
    /// The credential for `password` (AlterUserScramCredentials sends the
    /// salted password; [`ScramCredential::from_salted_password`]).
    pub fn derive(mechanism: Mechanism, password: &[u8], salt: &[u8], iterations: u32) -> Self {
        let salted = mechanism.salted_password(password, salt, iterations);
        Self::from_salted_password(mechanism, &salted, salt, iterations)
    }

    pub fn from_salted_password(
        mechanism: Mechanism,
        salted_password: &[u8],
        salt: &[u8],
        iterations: u32,
    ) -> Self {
        let client_key = mechanism.hmac(salted_password, &[b"Client Key"]);
        ScramCredential {
            mechanism,
            salt: salt.to_vec(),
            iterations,
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(salted_password, &[b"Server Key"]),
        }
    }
}

/// The client side, for a broker authenticating to another (inter-broker
/// SASL): the client-first message, then the client-final message from the
/// server-first one, then the server-final message's check (the server
/// proves it knows the credential too).
pub struct ScramClient {
    mechanism: Mechanism,
    password: Vec<u8>,
    client_first_bare: String,
    nonce: String,
    /// ServerSignature expected in the server-final message.
    expected_server_final: Option<Vec<u8>>,
}

impl ScramClient {
    /// `nonce`: fresh printable randomness without `,`.
    pub fn new(mechanism: Mechanism, user: &str, password: &str, nonce: &str) -> ScramClient {
        let name = user.replace('=', "=3D").replace(',', "=2C");
        ScramClient {
            mechanism,
            password: password.as_bytes().to_vec(),
            client_first_bare: format!("n={name},r={nonce}"),
            nonce: nonce.to_string(),
            expected_server_final: None,
        }
    }

    pub fn client_first(&self) -> Vec<u8> {
        format!("n,,{}", self.client_first_bare).into_bytes()
    }

    /// The client-final message for the server-first one.
    pub fn client_final(&mut self, server_first: &[u8]) -> Result<Vec<u8>, ScramError> {
        let server_first =
            std::str::from_utf8(server_first).map_err(|_| ScramError::Malformed("utf-8"))?;
        let mut attrs = server_first.split(',');
        let nonce = attr(attrs.next(), 'r')?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(ScramError::Nonce);
        }
        let salt = BASE64
            .decode(attr(attrs.next(), 's')?)
            .map_err(|_| ScramError::Malformed("salt"))?;
        let iterations: u32 = attr(attrs.next(), 'i')?
            .parse()
            .map_err(|_| ScramError::Malformed("iterations"))?;
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(ScramError::Malformed("iterations"));
        }
        let m = self.mechanism;
        let salted = m.salted_password(&self.password, &salt, iterations);
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let (proof, server_signature) = m.proof_and_signature(&salted, auth.as_bytes());
        self.expected_server_final =
            Some(format!("v={}", BASE64.encode(server_signature)).into_bytes());
        Ok(format!("{without_proof},p={}", BASE64.encode(proof)).into_bytes())
    }

    /// Checks the server-final message: the server knew the credential.
    pub fn server_final(&self, message: &[u8]) -> Result<(), ScramError> {
        match &self.expected_server_final {
            Some(expected) if bool::from(expected.as_slice().ct_eq(message)) => Ok(()),
            Some(_) => Err(ScramError::InvalidProof),
            None => Err(ScramError::OutOfOrder),
        }
    }
}

/// Why an exchange failed. Every one is SASL_AUTHENTICATION_FAILED to the
/// client; the distinction is for the broker's log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    #[error("invalid SCRAM message: {0}")]
    Malformed(&'static str),
    #[error("channel binding is not supported")]
    ChannelBinding,
    #[error("authorization id differs from the user name")]
    AuthzId,
    #[error("unsupported SCRAM extension")]
    Extension,
    #[error("unknown user or mechanism")]
    UnknownUser,
    #[error("nonce mismatch")]
    Nonce,
    #[error("invalid credentials")]
    InvalidProof,
    #[error("message out of order")]
    OutOfOrder,
}

enum State {
    ClientFirst,
    ClientFinal {
        credential: ScramCredential,
        username: String,
        nonce: String,
        /// client-first-message-bare "," server-first-message
        auth_prefix: String,
    },
    Done,
}

/// One SCRAM exchange on the server.
pub struct ScramServer {
    mechanism: Mechanism,
    state: State,
}

/// `saslname` of RFC 5802: `=2C` is `,` and `=3D` is `=`; any other `=` or
/// a bare `,` is malformed.
fn decode_saslname(s: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(['=', ',']) {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if tail.starts_with("=2C") {
            out.push(',');
        } else if tail.starts_with("=3D") {
            out.push('=');
        } else {
            return Err(ScramError::Malformed("user name"));
        }
        rest = &tail[3..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The value of attribute `key` (`k=value`), or malformed.
fn attr(field: Option<&str>, key: char) -> Result<&str, ScramError> {
    field
        .and_then(|f| f.strip_prefix(key))
        .and_then(|f| f.strip_prefix('='))
        .ok_or(ScramError::Malformed("attribute"))
}

impl ScramServer {
    pub fn new(mechanism: Mechanism) -> ScramServer {
        ScramServer {
            mechanism,
            state: State::ClientFirst,
        }
    }

    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// Whether the next message is the client-first one.
    pub fn expects_client_first(&self) -> bool {
        matches!(self.state, State::ClientFirst)
    }

    /// Answers the client-first message with the server-first message.
    /// `lookup` finds the user's credential for this mechanism;
    /// `server_nonce` is fresh printable randomness (no `,`).
    pub fn client_first(
        &mut self,
        message: &[u8],
        lookup: impl FnOnce(&str) -> Option<ScramCredential>,
        server_nonce: &str,
    ) -> Result<Vec<u8>, ScramError> {
        if !matches!(self.state, State::ClientFirst) {
            return Err(ScramError::OutOfOrder);
        }
        self.state = State::Done;
        let message = std::str::from_utf8(message).map_err(|_| ScramError::Malformed("utf-8"))?;
        // gs2-header: cbind-flag "," [authzid] ","
        let mut parts = message.splitn(3, ',');
        let cbind = parts.next().ok_or(ScramError::Malformed("gs2 header"))?;
        // Only "n" (as Kafka): "y" and "p=" name channel bindings.
        match cbind {
            "n" => {}
            c if c.starts_with("p=") => return Err(ScramError::ChannelBinding),
            _ => return Err(ScramError::Malformed("gs2 header")),
        }
        let authzid = parts.next().ok_or(ScramError::Malformed("gs2 header"))?;
        let bare = parts.next().ok_or(ScramError::Malformed("client-first"))?;
        let mut fields = bare.split(',');
        if fields.clone().next().is_some_and(|f| f.starts_with("m=")) {
            return Err(ScramError::Extension);
        }
        let username = decode_saslname(attr(fields.next(), 'n')?)?;
        let client_nonce = attr(fields.next(), 'r')?;
        if client_nonce.is_empty() || !client_nonce.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err(ScramError::Malformed("nonce"));
        }
        // Extensions are ignored, as Kafka does, except `tokenauth=true`
        // (a delegation token's credentials: none are issued here).
        for ext in fields {
            let (key, value) = ext
                .split_once('=')
                .ok_or(ScramError::Malformed("extension"))?;
            if key == "tokenauth" && value.eq_ignore_ascii_case("true") {
                return Err(ScramError::Extension);
            }
        }
        if !authzid.is_empty() {
            let id = authzid
                .strip_prefix("a=")
                .ok_or(ScramError::Malformed("authzid"))?;
            if decode_saslname(id)? != username {
                return Err(ScramError::AuthzId);
            }
        }
        let credential = lookup(&username)
            .filter(|c| c.mechanism == self.mechanism)
            .ok_or(ScramError::UnknownUser)?;
        if server_nonce.is_empty() || server_nonce.contains(',') {
            return Err(ScramError::Malformed("server nonce"));
        }
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!(
            "r={nonce},s={},i={}",
            BASE64.encode(&credential.salt),
            credential.iterations
        );
        self.state = State::ClientFinal {
            auth_prefix: format!("{bare},{server_first}"),
            credential,
            username,
            nonce,
        };
        Ok(server_first.into_bytes())
    }

    /// Checks the client-final message's proof; answers the server-final
    /// message and the authenticated user name.
    pub fn client_final(&mut self, message: &[u8]) -> Result<(Vec<u8>, String), ScramError> {
        let State::ClientFinal {
            credential,
            username,
            nonce,
            auth_prefix,
        } = std::mem::replace(&mut self.state, State::Done)
        else {
            return Err(ScramError::OutOfOrder);
        };
        let message = std::str::from_utf8(message).map_err(|_| ScramError::Malformed("utf-8"))?;
        let (without_proof, proof) = message
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("proof"))?;
        let mut fields = without_proof.split(',');
        let binding = attr(fields.next(), 'c')?;
        // base64("n,,"): the header of the first message, no binding data.
        if binding != "biws" {
            return Err(ScramError::ChannelBinding);
        }
        // Kafka accepts a nonce that ends with the server-first one:
        // librdkafka before 2.1 sends its own nonce in front of it again.
        // The server's fresh part is still there, so a replay still fails.
        if !attr(fields.next(), 'r')?.ends_with(&nonce) {
            return Err(ScramError::Nonce);
        }
        if fields.next().is_some() {
            return Err(ScramError::Extension);
        }
        let proof = BASE64
            .decode(proof)
            .map_err(|_| ScramError::Malformed("proof"))?;
        let m = credential.mechanism;
        let auth_message = format!("{auth_prefix},{without_proof}");
        let client_signature = m.hmac(&credential.stored_key, &[auth_message.as_bytes()]);
        if proof.len() != client_signature.len() {
            return Err(ScramError::InvalidProof);
        }
        let client_key: Vec<u8> = proof
            .iter()
            .zip(&client_signature)
            .map(|(p, s)| p ^ s)
            .collect();
        if !bool::from(m.hash(&client_key).ct_eq(&credential.stored_key)) {
            return Err(ScramError::InvalidProof);
        }
        let server_signature = m.hmac(&credential.server_key, &[auth_message.as_bytes()]);
        let server_final = format!("v={}", BASE64.encode(server_signature));
        Ok((server_final.into_bytes(), username))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A SCRAM client, for the tests: RFC 5802's computations from the
    /// password.
    fn client_final(
        m: Mechanism,
        password: &str,
        client_first_bare: &str,
        server_first: &str,
    ) -> (String, Vec<u8>) {
        client_final_with_prefix(m, password, client_first_bare, server_first, "")
    }

    /// `nonce_prefix` before the nonce: librdkafka before 2.1 repeats its
    /// own nonce there.
    fn client_final_with_prefix(
        m: Mechanism,
        password: &str,
        client_first_bare: &str,
        server_first: &str,
        nonce_prefix: &str,
    ) -> (String, Vec<u8>) {
        let mut attrs = server_first.split(',');
        let nonce = attrs.next().unwrap().strip_prefix("r=").unwrap();
        let nonce = format!("{nonce_prefix}{nonce}");
        let salt = BASE64
            .decode(attrs.next().unwrap().strip_prefix("s=").unwrap())
            .unwrap();
        let i: u32 = attrs
            .next()
            .unwrap()
            .strip_prefix("i=")
            .unwrap()
            .parse()
            .unwrap();
        let salted = m.salted_password(password.as_bytes(), &salt, i);
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{client_first_bare},{server_first},{without_proof}");
        let (proof, signature) = m.proof_and_signature(&salted, auth.as_bytes());
        let expected_server_final = format!("v={}", BASE64.encode(signature));
        (
            format!("{without_proof},p={}", BASE64.encode(proof)),
            expected_server_final.into_bytes(),
        )
    }

    /// RFC 7677's SCRAM-SHA-256 example, message for message.
    #[test]
    fn rfc7677_example() {
        let salt = BASE64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let cred = ScramCredential::derive(Mechanism::Sha256, b"pencil", &salt, 4096);
        let mut server = ScramServer::new(Mechanism::Sha256);
        let first = server
            .client_first(
                b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO",
                |u| (u == "user").then(|| cred.clone()),
                "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
            )
            .unwrap();
        assert_eq!(
            first,
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let (last, user) = server
            .client_final(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
            .unwrap();
        assert_eq!(last, b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=");
        assert_eq!(user, "user");
    }

    #[test]
    fn both_mechanisms_accept_the_password_and_refuse_another() {
        for m in Mechanism::ALL {
            for (password, tried, ok) in [("s3cret", "s3cret", true), ("s3cret", "s3cret!", false)]
            {
                let cred = ScramCredential::derive(m, password.as_bytes(), b"salty", 4096);
                let mut server = ScramServer::new(m);
                let bare = "n=al=3Dice=2C,r=abc";
                let first = server
                    .client_first(
                        format!("n,,{bare}").as_bytes(),
                        |u| {
                            assert_eq!(u, "al=ice,");
                            Some(cred.clone())
                        },
                        "xyz",
                    )
                    .unwrap();
                let first = String::from_utf8(first).unwrap();
                let (final_msg, expected) = client_final(m, tried, bare, &first);
                let got = server.client_final(final_msg.as_bytes());
                if ok {
                    assert_eq!(got, Ok((expected, "al=ice,".to_string())), "{m:?}");
                } else {
                    assert_eq!(got, Err(ScramError::InvalidProof), "{m:?}");
                }
                // One exchange per server: a replay is out of order.
                assert_eq!(
                    server.client_final(final_msg.as_bytes()),
                    Err(ScramError::OutOfOrder)
                );
            }
        }
    }

    #[test]
    fn malformed_and_refused_first_messages() {
        let cred = ScramCredential::derive(Mechanism::Sha512, b"p", b"s", 4096);
        let cases: &[(&[u8], ScramError)] = &[
            (b"", ScramError::Malformed("gs2 header")),
            (b"n", ScramError::Malformed("gs2 header")),
            (b"x,,n=u,r=a", ScramError::Malformed("gs2 header")),
            (b"p=tls-unique,,n=u,r=a", ScramError::ChannelBinding),
            (b"n,,r=a", ScramError::Malformed("attribute")),
            (b"n,,n=u", ScramError::Malformed("attribute")),
            (b"n,,n=u,r=", ScramError::Malformed("nonce")),
            (b"n,,n=u=x,r=a", ScramError::Malformed("user name")),
            (b"n,,m=ext,n=u,r=a", ScramError::Extension),
            (b"n,,n=u,r=a,tokenauth=true", ScramError::Extension),
            (b"n,,n=u,r=a,junk", ScramError::Malformed("extension")),
            (b"y,,n=u,r=a", ScramError::Malformed("gs2 header")),
            (b"n,a=other,n=u,r=a", ScramError::AuthzId),
            (b"n,,n=nobody,r=a", ScramError::UnknownUser),
            (b"\xff,,n=u,r=a", ScramError::Malformed("utf-8")),
        ];
        for (msg, err) in cases {
            let mut server = ScramServer::new(Mechanism::Sha512);
            let got = server.client_first(msg, |u| (u == "u").then(|| cred.clone()), "n");
            assert_eq!(
                got.as_ref().err(),
                Some(err),
                "{}",
                String::from_utf8_lossy(msg)
            );
        }
        // The matching authzid is accepted; a credential of the other
        // mechanism is an unknown user.
        let mut server = ScramServer::new(Mechanism::Sha512);
        assert!(server
            .client_first(b"n,a=u,n=u,r=a", |_| Some(cred.clone()), "n")
            .is_ok());
        // Other extensions are ignored.
        let mut server = ScramServer::new(Mechanism::Sha512);
        assert!(server
            .client_first(b"n,,n=u,r=a,foo=bar", |_| Some(cred.clone()), "n")
            .is_ok());
        let mut server = ScramServer::new(Mechanism::Sha256);
        assert_eq!(
            server.client_first(b"n,,n=u,r=a", |_| Some(cred.clone()), "n"),
            Err(ScramError::UnknownUser)
        );
    }

    /// The client and the server agree with each other, and with RFC
    /// 7677's example message for message.
    #[test]
    fn client_against_the_server() {
        let b64 = |s: &str| BASE64.decode(s).unwrap();
        let salt = b64("W22ZaJ0SNY7soEsUEjb6gQ==");
        let cred = ScramCredential::derive(Mechanism::Sha256, b"pencil", &salt, 4096);
        let mut client =
            ScramClient::new(Mechanism::Sha256, "user", "pencil", "rOprNGfwEbeRWgbNEkqO");
        assert_eq!(client.client_first(), b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let mut server = ScramServer::new(Mechanism::Sha256);
        let first = server
            .client_first(
                &client.client_first(),
                |_| Some(cred.clone()),
                "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
            )
            .unwrap();
        let last = client.client_final(&first).unwrap();
        assert_eq!(
            last,
            b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        let (server_final, user) = server.client_final(&last).unwrap();
        assert_eq!(user, "user");
        assert_eq!(client.server_final(&server_final), Ok(()));
        assert_eq!(
            client.server_final(b"v=AAAA"),
            Err(ScramError::InvalidProof)
        );
        // A server that does not extend the client's nonce is refused.
        let mut c = ScramClient::new(Mechanism::Sha512, "u,=", "p", "abc");
        assert_eq!(c.client_first(), b"n,,n=u=2C=3D,r=abc");
        assert_eq!(
            c.client_final(b"r=abc,s=AAAA,i=4096"),
            Err(ScramError::Nonce)
        );
        assert_eq!(
            c.client_final(b"r=xyzq,s=AAAA,i=4096"),
            Err(ScramError::Nonce)
        );
    }

    #[test]
    fn final_message_checks() {
        let cred = ScramCredential::derive(Mechanism::Sha256, b"pw", b"salt", 4096);
        let start = || {
            let mut s = ScramServer::new(Mechanism::Sha256);
            let first = s
                .client_first(b"n,,n=u,r=cn", |_| Some(cred.clone()), "sn")
                .unwrap();
            (s, String::from_utf8(first).unwrap())
        };
        let (mut s, first) = start();
        let (good, _) = client_final(Mechanism::Sha256, "pw", "n=u,r=cn", &first);
        let bad_nonce = good.replace("r=cnsn", "r=cnsX");
        assert_eq!(s.client_final(bad_nonce.as_bytes()), Err(ScramError::Nonce));
        // librdkafka 2.0's final nonce (its own again, then the server's):
        // accepted, as Kafka accepts it, with a proof over what it sent.
        let (mut s, first) = start();
        let (doubled, _) =
            client_final_with_prefix(Mechanism::Sha256, "pw", "n=u,r=cn", &first, "cn");
        assert!(doubled.contains("r=cncnsn"));
        assert_eq!(
            s.client_final(doubled.as_bytes()).map(|(_, u)| u),
            Ok("u".to_string())
        );
        let (mut s, _) = start();
        let bad_cb = good.replace("c=biws", "c=cD10bHMtdW5pcXVlLCw=");
        assert_eq!(
            s.client_final(bad_cb.as_bytes()),
            Err(ScramError::ChannelBinding)
        );
        let (mut s, _) = start();
        assert_eq!(
            s.client_final(b"c=biws,r=cnsn"),
            Err(ScramError::Malformed("proof"))
        );
        let (mut s, _) = start();
        assert_eq!(
            s.client_final(b"c=biws,r=cnsn,p=AAAA"),
            Err(ScramError::InvalidProof),
            "a short proof is a wrong one"
        );
        let (mut s, _) = start();
        assert_eq!(
            s.client_final(good.as_bytes()).map(|(_, u)| u),
            Ok("u".to_string())
        );
        // client-final before client-first.
        let mut fresh = ScramServer::new(Mechanism::Sha256);
        assert_eq!(
            fresh.client_final(good.as_bytes()),
            Err(ScramError::OutOfOrder)
        );
    }
}
