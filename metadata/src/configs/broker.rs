//! The broker settings that are not topic configs' synonyms: one row each,
//! with type, default, validation, whether it changes without a restart
//! and whether Strand acts on it. The defaults live here only: the broker's
//! configuration, DescribeConfigs and docs/CONFIGURATION.md all read them
//! from this table.

use super::def::ConfigType::{Boolean, Double, Int, List, Long, Password, Short};
use super::def::{def, ConfigType, TopicConfigDef as Def, UpdateMode::*};

/// A broker setting (no topic config takes it as its default).
const fn key(
    name: &'static str,
    kind: ConfigType,
    default: &'static str,
    doc: &'static str,
) -> Def {
    def(name, None, default, kind, None, &[], doc).dynamic(ReadOnly)
}

const STR: ConfigType = ConfigType::String;
const LMAX: &str = "9223372036854775807";
const IMAX: &str = "2147483647";

/// Why `num.io.threads` and `num.network.threads` do nothing.
const ONE_RUNTIME: &str =
    "requests and connections are served by the async runtime's workers, one per core";

/// Why the offload setting does nothing.
const ON_THE_COORDINATOR: &str =
    "Strand computes target assignments on the group coordinator's task";

/// Every broker setting Strand knows besides the topic configs' synonyms,
/// sorted by name. An empty default is Kafka's null: the value then comes
/// from elsewhere, as the row's text says, or there is none.
pub const BROKER_CONFIGS: &[Def] = &[
    key("add.partitions.to.txn.retry.backoff.max.ms", Int, "100", "How long, at most, a partition leader retries adding a partition to a transaction while the coordinator answers CONCURRENT_TRANSACTIONS (KIP-890).").at_least(0),
    key("add.partitions.to.txn.retry.backoff.ms", Int, "20", "The first wait between those retries.").at_least(0),
    key("advertised.listeners", STR, "", "The listeners clients and other brokers are told to connect to (NAME://host:port, comma-separated). Null: `listeners`, with an empty host advertised as this machine's canonical host name."),
    key("allow.everyone.if.no.acl.found", Boolean, "false", "With an authorizer: whether a resource no ACL matches is open to everyone."),
    key("authorizer.class.name", STR, "", "The authorizer: Kafka's StandardAuthorizer (or its ZooKeeper-era AclAuthorizer, same semantics). Empty: none, everything is allowed."),
    key("auto.create.topics.enable", Boolean, "true", "Whether Metadata requests for an unknown topic create it."),
    key("auto.leader.rebalance.enable", Boolean, "true", "Whether the active controller moves leaderships back to preferred replicas."),
    key("broker.heartbeat.interval.ms", Int, "2000", "How often a broker heartbeats to the active controller.").at_least(1),
    key("broker.id", Int, "1", "The node's id when `node.id` is not set.").at_least(0),
    key("broker.rack", STR, "", "The broker's rack, for rack-aware replica placement and follower fetching."),
    key("broker.session.timeout.ms", Int, "9000", "How long a broker that stops heartbeating stays unfenced.").at_least(1),
    key("connections.max.idle.ms", Long, "600000", "Idle connections are closed after this long; negative: never."),
    key("connections.max.reauth.ms", Long, "0", "SASL sessions last at most this long before the client must re-authenticate (KIP-368); 0: forever.").at_least(0),
    key("controller.listener.names", STR, "CONTROLLER", "The listeners the controllers serve the quorum on."),
    key("controller.quorum.bootstrap.servers", List, "", "Kafka's dynamic quorum (KIP-853) bootstrap list.")
        .inert("the quorum is static: its voters come from `controller.quorum.voters` or `format --initial-controllers`"),
    key("controller.quorum.election.timeout.ms", Int, "1000", "How long a controller waits without a leader before it stands for election.").at_least(1),
    key("controller.quorum.voters", List, "", "The controller quorum: id@host:port, comma-separated. Empty on a self-formatted single node."),
    key("default.replication.factor", Int, "1", "The replication factor of topics created without one.").at_least(1),
    key("delete.topic.enable", Boolean, "true", "Whether topics can be deleted.")
        .inert("topics can always be deleted"),
    key("follower.replication.throttled.rate", Long, LMAX, "Bytes per second a broker fetches for its throttled follower replicas (follower.replication.throttled.replicas), summed over them.").at_least(0).dynamic(DynamicOnly),
    key("group.consumer.assignment.interval.ms", Int, "1000", "The least time between two target assignments of a consumer-protocol group (KIP-1263).").at_least(0),
    key("group.consumer.assignor.offload.enable", Boolean, "true", "Whether target assignments are computed off the coordinator's thread.").inert(ON_THE_COORDINATOR),
    key("group.consumer.assignors", List, "uniform,range", "The server-side assignors of consumer-protocol groups (KIP-848); the first is the default.").one_of(&["uniform", "range", "org.apache.kafka.coordinator.group.assignor.UniformAssignor", "org.apache.kafka.coordinator.group.assignor.RangeAssignor"]),
    key("group.consumer.heartbeat.interval.ms", Int, "5000", "The heartbeat interval consumer-protocol members are given.").at_least(1),
    key("group.consumer.max.assignment.interval.ms", Int, "15000", "The largest assignment interval a consumer-protocol group may set.").at_least(0),
    key("group.consumer.max.heartbeat.interval.ms", Int, "15000", "The largest heartbeat interval a consumer group may set for itself (`consumer.heartbeat.interval.ms`, a GROUP config).").at_least(1),
    key("group.consumer.max.session.timeout.ms", Int, "60000", "The largest session timeout a consumer group may set for itself (`consumer.session.timeout.ms`, a GROUP config).").at_least(1),
    key("group.consumer.max.size", Int, IMAX, "The most members a consumer-protocol group admits.").at_least(1),
    key("group.consumer.migration.policy", STR, "bidirectional", "Whether groups move between the classic and the consumer protocol while they have members.").one_of(&["disabled", "upgrade", "downgrade", "bidirectional"]),
    key("group.consumer.min.assignment.interval.ms", Int, "0", "The smallest assignment interval a consumer-protocol group may set.").at_least(0),
    key("group.consumer.min.heartbeat.interval.ms", Int, "5000", "The smallest heartbeat interval a consumer group may set for itself (`consumer.heartbeat.interval.ms`, a GROUP config).").at_least(1),
    key("group.consumer.min.session.timeout.ms", Int, "45000", "The smallest session timeout a consumer group may set for itself (`consumer.session.timeout.ms`, a GROUP config).").at_least(1),
    key("group.consumer.regex.refresh.interval.ms", Int, "600000", "How often the topics matching a consumer-protocol group's regexes are looked up again.").at_least(1).inert("Strand matches a group's regexes against the topics in every heartbeat that needs them"),
    key("group.consumer.session.timeout.ms", Int, "45000", "How long a consumer-protocol member that stops heartbeating stays in its group.").at_least(1),
    key("group.coordinator.rebalance.protocols", List, "classic,consumer,streams", "The group protocols the coordinator serves: `consumer` is KIP-848's (ConsumerGroupHeartbeat, ConsumerGroupDescribe, OffsetCommit/OffsetFetch v9); without it consumers must use the classic protocol. Strand has no streams (KIP-1071) or share (KIP-932) groups: naming them changes nothing.").one_of(&["classic", "consumer", "share", "streams"]),

    key("group.initial.rebalance.delay.ms", Int, "3000", "How long a new classic group waits for more members before its first rebalance.").at_least(0),
    key("group.max.session.timeout.ms", Int, "1800000", "The largest session timeout a classic group member may ask for.").at_least(1),
    key("group.max.size", Int, IMAX, "The most members a classic group admits.").at_least(1),
    key("group.min.session.timeout.ms", Int, "6000", "The smallest session timeout a classic group member may ask for.").at_least(1),
    key("inter.broker.listener.name", STR, "PLAINTEXT", "The listener brokers fetch from each other on."),
    key("leader.imbalance.check.interval.seconds", Long, "300", "How often the active controller looks for leaderships away from their preferred replica.").at_least(1),
    key("leader.replication.throttled.rate", Long, LMAX, "Bytes per second a broker sends to the throttled replicas it leads (leader.replication.throttled.replicas), summed over them.").at_least(0).dynamic(DynamicOnly),
    key("listener.security.protocol.map", STR, "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT", "Each listener's security protocol: NAME:PROTOCOL, comma-separated."),
    key("listeners", STR, "PLAINTEXT://127.0.0.1:9092", "The listeners to bind: NAME://host:port, comma-separated (an empty host: every interface)."),
    key("log.cleaner.backoff.ms", Long, "15000", "How long a cleaner thread with nothing to clean waits.").at_least(0).dynamic(ClusterWide),
    key("log.cleaner.dedupe.buffer.size", Long, "134217728", "The memory for the cleaner's offset maps, shared by its threads.").at_least(0).dynamic(ClusterWide),
    key("log.cleaner.enable", Boolean, "true", "Whether the log cleaner runs (compacted topics need it)."),
    key("log.cleaner.io.buffer.load.factor", Double, "0.9", "How full the cleaner lets an offset map become.").dynamic(ClusterWide),
    key("log.cleaner.io.buffer.size", Int, "524288", "The memory for the cleaner's read and write buffers, shared by its threads.").at_least(0).dynamic(ClusterWide),
    key("log.cleaner.io.max.bytes.per.second", Double, "1.7976931348623157E308", "The cleaner's read plus write rate, at most, in bytes per second.").dynamic(ClusterWide),
    key("log.cleaner.threads", Int, "1", "The log cleaner's threads.").at_least(1).dynamic(ClusterWide),
    key("log.dir", STR, "./data", "The log directory when `log.dirs` is not set."),
    key("log.dirs", STR, "", "The log directories, comma-separated. Null: `log.dir`."),
    key("log.retention.check.interval.ms", Long, "300000", "How often retention deletes old segments.").at_least(1),
    key("log.retention.hours", Int, "168", "Retention time when `log.retention.ms` and `log.retention.minutes` are not set.").at_least(1),
    key("log.retention.minutes", Int, "", "Retention time when `log.retention.ms` is not set. Null: `log.retention.hours`.").at_least(0),
    key("log.roll.hours", Int, "168", "How long a segment stays active when `log.roll.ms` is not set.").at_least(1),
    key("max.connections", Int, IMAX, "The most connections the broker accepts at once.").at_least(0),
    key("max.connections.per.ip", Int, IMAX, "The most connections the broker accepts at once from one address.").at_least(0),
    key("metadata.log.dir", STR, "", "Where Kafka keeps the metadata log.")
        .inert("the metadata log is kept in the first of log.dirs"),
    key("node.id", Int, "1", "This node's id, unique in the cluster.").at_least(0),
    key("num.io.threads", Int, "8", "Kafka's request handler threads.").at_least(1).inert(ONE_RUNTIME),
    key("num.network.threads", Int, "3", "Kafka's network threads.").at_least(1).inert(ONE_RUNTIME),
    key("num.partitions", Int, "1", "The partition count of topics created without one.").at_least(1),
    key("offset.metadata.max.bytes", Int, "4096", "The largest metadata string an offset commit may carry.").at_least(1),
    key("offsets.commit.timeout.ms", Int, "5000", "How long an offset commit waits for its write to replicate.").at_least(1),
    key("offsets.retention.check.interval.ms", Long, "600000", "How often expired committed offsets are removed.").at_least(1),
    key("offsets.retention.minutes", Int, "10080", "How long an empty group's committed offsets are kept.").at_least(1),
    key("offsets.topic.num.partitions", Int, "50", "`__consumer_offsets`' partition count (fixed once the topic exists).").at_least(1),
    key("offsets.topic.replication.factor", Short, "3", "`__consumer_offsets`' replication factor (capped by the brokers alive when it is created).").at_least(1),
    key("offsets.topic.segment.bytes", Int, "104857600", "`__consumer_offsets`' segment size.").at_least(1),
    key("process.roles", List, "broker,controller", "This node's roles: broker, controller or both.").one_of(&["broker", "controller"]),
    key("producer.id.expiration.ms", Int, "86400000", "How long an idle producer's state is kept.").at_least(1),
    key("queued.max.request.bytes", Long, "-1", "The bytes of requests held in memory at once; -1: no limit. At least `socket.request.max.bytes` when set."),
    key("quota.window.num", Int, "11", "How many windows client quota rates are measured over.").at_least(1),
    key("quota.window.size.seconds", Int, "1", "The length of a client quota window.").at_least(1),
    key("replica.alter.log.dirs.io.max.bytes.per.second", Long, LMAX, "Bytes per second a broker copies between its log directories (AlterReplicaLogDirs).").at_least(0).dynamic(DynamicOnly),
    key("replica.fetch.backoff.ms", Int, "1000", "How long a follower waits after a failed fetch.").at_least(0),
    key("replica.fetch.max.bytes", Int, "1048576", "The bytes a follower asks for per partition.").at_least(1),
    key("replica.fetch.min.bytes", Int, "1", "The bytes a follower's fetch waits for.").at_least(1),
    key("replica.fetch.response.max.bytes", Int, "10485760", "The bytes a follower asks for per fetch.").at_least(1),
    key("replica.fetch.wait.max.ms", Int, "500", "How long a follower's fetch waits for data.").at_least(0),
    key("replica.high.watermark.checkpoint.interval.ms", Long, "5000", "How often the high watermarks are written to disk.").at_least(1),
    key("replica.lag.time.max.ms", Long, "30000", "A follower not caught up for this long leaves the ISR.").at_least(1),
    key("replication.quota.window.num", Int, "11", "How many windows replication throttle rates are measured over.").at_least(1),
    key("replication.quota.window.size.seconds", Int, "1", "The length of a replication throttle window.").at_least(1),
    key("sasl.enabled.mechanisms", List, "GSSAPI", "The SASL mechanisms offered on SASL listeners (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)."),
    key("sasl.mechanism.controller.protocol", STR, "GSSAPI", "The SASL mechanism nodes use toward the controllers (PLAIN)."),
    key("sasl.mechanism.inter.broker.protocol", STR, "GSSAPI", "The SASL mechanism brokers use toward each other."),
    key("socket.request.max.bytes", Int, "104857600", "The largest request the broker reads.").at_least(1),
    key("ssl.client.auth", STR, "none", "Whether TLS listeners ask clients for certificates.").one_of(&["required", "requested", "none"]),
    key("ssl.enabled.protocols", List, "TLSv1.2,TLSv1.3", "The TLS versions offered."),
    key("ssl.endpoint.identification.algorithm", STR, "https", "Whether a broker checks the host name in another broker's certificate (https) or not (empty)."),
    key("ssl.key.password", Password, "", "The password of the private key in the key store.").dynamic(PerBroker),
    key("ssl.keystore.certificate.chain", Password, "", "The certificate chain, PEM, given inline.").dynamic(PerBroker),
    key("ssl.keystore.key", Password, "", "The private key, PEM, given inline.").dynamic(PerBroker),
    key("ssl.keystore.location", STR, "", "The key store file (PEM).").dynamic(PerBroker),
    key("ssl.keystore.password", Password, "", "The key store's password.").dynamic(PerBroker),
    key("ssl.keystore.type", STR, "JKS", "The key store's format: Strand reads PEM.").dynamic(PerBroker),
    key("ssl.principal.mapping.rules", STR, "DEFAULT", "How a client certificate's subject becomes a user name."),
    key("ssl.protocol", STR, "TLSv1.3", "The TLS context's protocol.")
        .inert("the version is negotiated among `ssl.enabled.protocols`"),
    key("ssl.truststore.certificates", Password, "", "The trusted certificates, PEM, given inline.").dynamic(PerBroker),
    key("ssl.truststore.location", STR, "", "The trust store file (PEM).").dynamic(PerBroker),
    key("ssl.truststore.password", Password, "", "The trust store's password.")
        .inert("PEM trust stores have no password")
        .dynamic(PerBroker),
    key("ssl.truststore.type", STR, "JKS", "The trust store's format: Strand reads PEM.").dynamic(PerBroker),
    key("strand.http.listener", STR, "", "Strand's own: host:port of the HTTP listener for /metrics, /health/live, /health/ready and the status page. Empty: none."),
    key("strand.log.format", STR, "text", "Strand's own: the log's format, text or json (one JSON object per line).").one_of(&["text", "json"]),
    key("strand.log.level", STR, "", "Strand's own: the log filter, as tracing's directives (e.g. `info,strand_broker::replica_manager=debug`); RUST_LOG wins when set. Empty: info."),
    // On by default: leases cost no throughput this machine can resolve
    // (BENCHMARKS.md, "Write leases").
    key("strand.write.lease.enable", Boolean, "true", "Strand's own: leaders append only under a lease the controller grants in heartbeat answers."),
    key("strand.write.lease.ms", Long, "", "Strand's own: the lease's length, below broker.session.timeout.ms. Null: two thirds of broker.session.timeout.ms.").at_least(1),
    key("strand.write.lease.safety.margin.ms", Long, "", "Strand's own: how long before its lease ends a leader stops appending. Null: a twelfth of the lease.").at_least(0),
    key("super.users", STR, "", "Principals the authorizer allows everything, semicolon-separated."),
    key("transaction.abort.timed.out.transaction.cleanup.interval.ms", Int, "10000", "How often the transaction coordinator aborts transactions past their timeout.").at_least(1),
    key("transaction.max.timeout.ms", Int, "900000", "The largest transaction timeout a producer may ask for.").at_least(1),
    key("transaction.partition.verification.enable", Boolean, "true", "Whether a partition leader checks a transactional batch's partition with the coordinator (KIP-890)."),
    key("transaction.remove.expired.transaction.cleanup.interval.ms", Int, "3600000", "How often expired transactional ids are removed.").at_least(1),
    key("transaction.state.log.min.isr", Int, "2", "`__transaction_state`'s min.insync.replicas.").at_least(1),
    key("transaction.state.log.num.partitions", Int, "50", "`__transaction_state`'s partition count (fixed once the topic exists).").at_least(1),
    key("transaction.state.log.replication.factor", Short, "3", "`__transaction_state`'s replication factor (capped by the brokers alive when it is created).").at_least(1),
    key("transaction.state.log.segment.bytes", Int, "104857600", "`__transaction_state`'s segment size.").at_least(1),
    key("transactional.id.expiration.ms", Int, "604800000", "How long an idle transactional id is kept.").at_least(1),
    key("unclean.leader.election.interval.ms", Long, "300000", "How often the active controller elects unclean leaders for leaderless partitions whose topic allows it.").at_least(1),
];

/// The row for `name`, a broker setting that is not a topic config's synonym.
pub fn broker_config(name: &str) -> Option<&'static Def> {
    BROKER_CONFIGS.iter().find(|d| d.name == name)
}
