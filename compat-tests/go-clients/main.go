// Go clients against a running broker (tests/go_clients.rs runs it against
// Strand): IBM/sarama, segmentio/kafka-go and franz-go's kadm, each through
// what a Go service does with it, each check a property the service relies
// on. Exits 1 naming the first check that fails.
//
//	go-clients -bootstrap HOST:PORT[,...] -rf N -client sarama|kafka-go|kadm
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const messages = 600

var (
	bootstrap = flag.String("bootstrap", "127.0.0.1:9092", "the brokers")
	rf        = flag.Int("rf", 1, "replication factor of the topics created")
	client    = flag.String("client", "sarama", "sarama, kafka-go or kadm")
)

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "FAIL: "+format+"\n", args...)
	os.Exit(1)
}

func check(err error, what string) {
	if err != nil {
		fail("%s: %v", what, err)
	}
}

// eventually retries cond until it holds, for up to 15 s: what one broker
// commits, another serves once its metadata has caught up (in Kafka as in
// Strand). It fails with cond's last error, and reports how long the wait
// took when it was not at once.
func eventually(what string, cond func() error) {
	start := time.Now()
	for {
		err := cond()
		if err == nil {
			if waited := time.Since(start); waited > 50*time.Millisecond {
				fmt.Printf("%s: held after %v\n", what, waited.Round(time.Millisecond))
			}
			return
		}
		if time.Since(start) > 15*time.Second {
			fail("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func main() {
	flag.Parse()
	brokers := strings.Split(*bootstrap, ",")
	switch *client {
	case "sarama":
		runSarama(brokers)
	case "kafka-go":
		runKafkaGo(brokers)
	case "kadm":
		runKadm(brokers)
	default:
		fail("unknown client %q", *client)
	}
	fmt.Printf("%s: every check passed\n", *client)
}

// values are the messages each run writes: distinct, so a duplicate or a
// loss shows by value.
func values(prefix string) []string {
	out := make([]string, messages)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

// exactlyOnce: every value of want read, none twice, nothing else.
func exactlyOnce(what string, want, got []string) {
	seen := map[string]int{}
	for _, v := range got {
		seen[v]++
	}
	for _, v := range want {
		if seen[v] != 1 {
			fail("%s: %q read %d times", what, v, seen[v])
		}
	}
	if len(got) != len(want) {
		fail("%s: read %d records, want %d", what, len(got), len(want))
	}
}

// ---- sarama ----

func saramaConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Version = sarama.V3_6_0_0
	cfg.ClientID = "strand-go-clients"
	cfg.Metadata.Retry.Max = 20
	cfg.Metadata.Retry.Backoff = 250 * time.Millisecond
	return cfg
}

type saramaHandler struct {
	mu   sync.Mutex
	got  []string
	want int
	done chan struct{}
	once sync.Once
}

func (h *saramaHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *saramaHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *saramaHandler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		h.mu.Lock()
		h.got = append(h.got, string(m.Value))
		if len(h.got) >= h.want {
			h.once.Do(func() { close(h.done) })
		}
		h.mu.Unlock()
		s.MarkMessage(m, "")
	}
	return nil
}

func runSarama(brokers []string) {
	topic, group := "sarama-topic", "sarama-group"
	cfg := saramaConfig()
	admin, err := sarama.NewClusterAdmin(brokers, cfg)
	check(err, "sarama: cluster admin")
	defer admin.Close()
	retention := "3600000"
	check(admin.CreateTopic(topic, &sarama.TopicDetail{
		NumPartitions:     3,
		ReplicationFactor: int16(*rf),
		ConfigEntries:     map[string]*string{"retention.ms": &retention},
	}, false), "sarama: CreateTopic")
	err = admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: int16(*rf)}, false)
	var terr *sarama.TopicError
	if !errors.As(err, &terr) || terr.Err != sarama.ErrTopicAlreadyExists {
		fail("sarama: CreateTopic again: want TOPIC_ALREADY_EXISTS, got %v", err)
	}
	eventually("sarama: ListTopics shows the topic", func() error {
		topics, err := admin.ListTopics()
		if err != nil {
			return err
		}
		if d, ok := topics[topic]; !ok || d.NumPartitions != 3 {
			return fmt.Errorf("%s missing or not 3 partitions: %+v", topic, d)
		}
		return nil
	})
	eventually("sarama: DescribeConfig shows retention.ms", func() error {
		entries, err := admin.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic})
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.Name == "retention.ms" && e.Value == retention {
				return nil
			}
		}
		return fmt.Errorf("retention.ms is not %s", retention)
	})

	// An idempotent acks=all producer.
	pcfg := saramaConfig()
	pcfg.Producer.Idempotent = true
	pcfg.Producer.RequiredAcks = sarama.WaitForAll
	pcfg.Producer.Return.Successes = true
	pcfg.Producer.Retry.Max = 20
	pcfg.Net.MaxOpenRequests = 1
	producer, err := sarama.NewSyncProducer(brokers, pcfg)
	check(err, "sarama: producer")
	want := values("sarama")
	msgs := make([]*sarama.ProducerMessage, 0, len(want))
	for i, v := range want {
		msgs = append(msgs, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(strconv.Itoa(i)), Value: sarama.StringEncoder(v)})
	}
	check(producer.SendMessages(msgs), "sarama: SendMessages")
	check(producer.Close(), "sarama: producer close")

	// A consumer group reads them all once and commits.
	ccfg := saramaConfig()
	ccfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	ccfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategySticky()}
	cg, err := sarama.NewConsumerGroup(brokers, group, ccfg)
	check(err, "sarama: consumer group")
	h := &saramaHandler{want: len(want), done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	consumed := make(chan error, 1)
	go func() {
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, h); err != nil && ctx.Err() == nil {
				consumed <- err
				return
			}
		}
		consumed <- nil
	}()
	select {
	case <-h.done:
	case err := <-consumed:
		fail("sarama: Consume: %v", err)
	case <-ctx.Done():
		fail("sarama: consumer group read %d of %d within 120 s", len(h.got), len(want))
	}
	cancel()
	<-consumed
	check(cg.Close(), "sarama: consumer group close (commits)")
	h.mu.Lock()
	exactlyOnce("sarama consumer group", want, h.got)
	h.mu.Unlock()

	// What it committed is the end of every partition.
	client, err := sarama.NewClient(brokers, saramaConfig())
	check(err, "sarama: client")
	defer client.Close()
	offsets, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {0, 1, 2}})
	check(err, "sarama: ListConsumerGroupOffsets")
	for p := int32(0); p < 3; p++ {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		check(err, "sarama: GetOffset")
		b := offsets.GetBlock(topic, p)
		if b == nil || b.Offset != end {
			fail("sarama: group %s committed %+v on partition %d, the end is %d", group, b, p, end)
		}
	}
	groups, err := admin.DescribeConsumerGroups([]string{group})
	check(err, "sarama: DescribeConsumerGroups")
	if len(groups) != 1 || groups[0].State != "Empty" {
		fail("sarama: DescribeConsumerGroups: want one Empty group, got %+v", groups)
	}

	// Transactions: a committed batch, an aborted one, a committed one,
	// read back under read_committed: the aborted batch never shows.
	tcfg := saramaConfig()
	tcfg.Producer.Idempotent = true
	tcfg.Producer.RequiredAcks = sarama.WaitForAll
	tcfg.Producer.Return.Successes = true
	tcfg.Producer.Transaction.ID = "sarama-txn"
	tcfg.Producer.Partitioner = sarama.NewManualPartitioner
	tcfg.Net.MaxOpenRequests = 1
	txp, err := sarama.NewSyncProducer(brokers, tcfg)
	check(err, "sarama: transactional producer")
	batch := func(prefix string, commit bool) []string {
		check(txp.BeginTxn(), "sarama: BeginTxn")
		vals := make([]string, 10)
		for i := range vals {
			vals[i] = fmt.Sprintf("%s-%d", prefix, i)
			_, _, err := txp.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: 0, Value: sarama.StringEncoder(vals[i])})
			check(err, "sarama: transactional send")
		}
		if commit {
			check(txp.CommitTxn(), "sarama: CommitTxn")
		} else {
			check(txp.AbortTxn(), "sarama: AbortTxn")
		}
		return vals
	}
	first := batch("committed-a", true)
	batch("aborted", false)
	last := batch("committed-b", true)
	check(txp.Close(), "sarama: transactional producer close")
	rcfg := saramaConfig()
	rcfg.Consumer.IsolationLevel = sarama.ReadCommitted
	consumer, err := sarama.NewConsumer(brokers, rcfg)
	check(err, "sarama: consumer")
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(topic, 0, sarama.OffsetOldest)
	check(err, "sarama: ConsumePartition")
	defer pc.Close()
	var read []string
	deadline := time.After(60 * time.Second)
	for len(read) == 0 || read[len(read)-1] != last[len(last)-1] {
		select {
		case m := <-pc.Messages():
			if strings.HasPrefix(string(m.Value), "committed-") || strings.HasPrefix(string(m.Value), "aborted") {
				read = append(read, string(m.Value))
			}
		case err := <-pc.Errors():
			fail("sarama: read_committed consume: %v", err)
		case <-deadline:
			fail("sarama: read_committed read %v within 60 s", read)
		}
	}
	wantTxn := append(append([]string{}, first...), last...)
	if strings.Join(read, ",") != strings.Join(wantTxn, ",") {
		fail("sarama: read_committed read %v, want %v", read, wantTxn)
	}

	check(admin.DeleteConsumerGroup(group), "sarama: DeleteConsumerGroup")
	check(admin.DeleteTopic(topic), "sarama: DeleteTopic")
}

// ---- segmentio/kafka-go ----

func runKafkaGo(brokers []string) {
	topic, group := "kafka-go-topic", "kafka-go-group"
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	cl := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 30 * time.Second}
	created, err := cl.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic: topic, NumPartitions: 3, ReplicationFactor: *rf,
	}}})
	check(err, "kafka-go: CreateTopics")
	check(created.Errors[topic], "kafka-go: CreateTopics "+topic)

	w := &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Topic:        topic,
		RequiredAcks: kafka.RequireAll,
		Balancer:     &kafka.RoundRobin{},
		BatchTimeout: 10 * time.Millisecond,
		MaxAttempts:  20,
	}
	want := values("kafka-go")
	msgs := make([]kafka.Message, len(want))
	for i, v := range want {
		msgs[i] = kafka.Message{Key: []byte(strconv.Itoa(i)), Value: []byte(v)}
	}
	// The topic's leaders may still be on their way: retried as a service would.
	for attempt := 0; ; attempt++ {
		err = w.WriteMessages(ctx, msgs...)
		if err == nil {
			break
		}
		if attempt == 20 || ctx.Err() != nil {
			fail("kafka-go: WriteMessages: %v", err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	check(w.Close(), "kafka-go: writer close")

	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers:     brokers,
		GroupID:     group,
		Topic:       topic,
		StartOffset: kafka.FirstOffset,
		MaxWait:     200 * time.Millisecond,
	})
	var got []string
	for len(got) < len(want) {
		m, err := r.FetchMessage(ctx)
		check(err, fmt.Sprintf("kafka-go: FetchMessage after %d", len(got)))
		got = append(got, string(m.Value))
		check(r.CommitMessages(ctx, m), "kafka-go: CommitMessages")
	}
	check(r.Close(), "kafka-go: reader close")
	exactlyOnce("kafka-go reader group", want, got)

	// Committed offsets are every partition's end.
	parts := []int{0, 1, 2}
	fetched, err := cl.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: group, Topics: map[string][]int{topic: parts}})
	check(err, "kafka-go: OffsetFetch")
	check(fetched.Error, "kafka-go: OffsetFetch")
	var req []kafka.OffsetRequest
	for _, p := range parts {
		req = append(req, kafka.LastOffsetOf(p))
	}
	ends, err := cl.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{topic: req}})
	check(err, "kafka-go: ListOffsets")
	last := map[int]int64{}
	for _, po := range ends.Topics[topic] {
		check(po.Error, "kafka-go: ListOffsets partition")
		last[po.Partition] = po.LastOffset
	}
	for _, po := range fetched.Topics[topic] {
		check(po.Error, "kafka-go: OffsetFetch partition")
		if po.CommittedOffset != last[po.Partition] {
			fail("kafka-go: committed %d on partition %d, the end is %d", po.CommittedOffset, po.Partition, last[po.Partition])
		}
	}
	if len(fetched.Topics[topic]) != 3 {
		fail("kafka-go: OffsetFetch answered %d partitions", len(fetched.Topics[topic]))
	}

	deleted, err := cl.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{topic}})
	check(err, "kafka-go: DeleteTopics")
	check(deleted.Errors[topic], "kafka-go: DeleteTopics "+topic)
}

// ---- franz-go kadm ----

func runKadm(brokers []string) {
	topic, group := "kadm-topic", "kadm-group"
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	check(err, "kadm: client")
	defer cl.Close()
	adm := kadm.NewClient(cl)

	meta, err := adm.BrokerMetadata(ctx)
	check(err, "kadm: BrokerMetadata")
	if len(meta.Brokers) != len(brokers) {
		fail("kadm: BrokerMetadata lists %d brokers, want %d", len(meta.Brokers), len(brokers))
	}
	created, err := adm.CreateTopics(ctx, 3, int16(*rf), map[string]*string{"retention.ms": kadm.StringPtr("3600000")}, topic)
	check(err, "kadm: CreateTopics")
	check(created.Error(), "kadm: CreateTopics")
	again, err := adm.CreateTopics(ctx, 3, int16(*rf), nil, topic)
	check(err, "kadm: CreateTopics again")
	if r, _ := again.On(topic, nil); r.Err == nil || !strings.Contains(r.Err.Error(), "TOPIC_ALREADY_EXISTS") {
		fail("kadm: CreateTopics again: want TOPIC_ALREADY_EXISTS, got %v", r.Err)
	}
	eventually("kadm: ListTopics shows the topic", func() error {
		listed, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return err
		}
		if d, ok := listed[topic]; !ok || len(d.Partitions) != 3 {
			return fmt.Errorf("%s missing or not 3 partitions", topic)
		}
		return nil
	})

	_, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("7200000")}}, topic)
	check(err, "kadm: AlterTopicConfigs")
	eventually("kadm: DescribeTopicConfigs shows the altered retention.ms", func() error {
		configs, err := adm.DescribeTopicConfigs(ctx, topic)
		if err != nil {
			return err
		}
		rc, err := configs.On(topic, nil)
		if err != nil {
			return err
		}
		for _, c := range rc.Configs {
			if c.Key == "retention.ms" && c.MaybeValue() == "7200000" {
				return nil
			}
		}
		return errors.New("retention.ms is not 7200000")
	})

	grown, err := adm.CreatePartitions(ctx, 1, topic)
	check(err, "kadm: CreatePartitions")
	check(grown.Error(), "kadm: CreatePartitions")

	// Produce, consume in a group, commit.
	want := values("kadm")
	pcl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.RequiredAcks(kgo.AllISRAcks()))
	check(err, "kadm: producer")
	var recs []*kgo.Record
	for _, v := range want {
		recs = append(recs, &kgo.Record{Value: []byte(v)})
	}
	check(pcl.ProduceSync(ctx, recs...).FirstErr(), "kadm: ProduceSync")
	pcl.Close()
	ccl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.DisableAutoCommit())
	check(err, "kadm: consumer")
	var got []string
	for len(got) < len(want) {
		fs := ccl.PollFetches(ctx)
		if errs := fs.Errors(); len(errs) > 0 {
			fail("kadm: PollFetches: %v", errs[0].Err)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	check(ccl.CommitUncommittedOffsets(ctx), "kadm: commit")
	ccl.Close()
	exactlyOnce("kgo consumer group", want, got)

	ends, err := adm.ListEndOffsets(ctx, topic)
	check(err, "kadm: ListEndOffsets")
	committed, err := adm.FetchOffsets(ctx, group)
	check(err, "kadm: FetchOffsets")
	ends.Each(func(o kadm.ListedOffset) {
		c, ok := committed.Lookup(topic, o.Partition)
		if o.Offset > 0 && (!ok || c.At != o.Offset) {
			fail("kadm: partition %d: committed %+v, end %d", o.Partition, c, o.Offset)
		}
	})
	described, err := adm.DescribeGroups(ctx, group)
	check(err, "kadm: DescribeGroups")
	if d, ok := described[group]; !ok || d.State != "Empty" {
		fail("kadm: DescribeGroups: want %s Empty, got %+v", group, described[group])
	}
	groups, err := adm.ListGroups(ctx)
	check(err, "kadm: ListGroups")
	names := groups.Groups()
	sort.Strings(names)
	if i := sort.SearchStrings(names, group); i == len(names) || names[i] != group {
		fail("kadm: ListGroups %v lacks %s", names, group)
	}

	// DeleteRecords below the end moves the start.
	toDelete := kadm.Offsets{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			toDelete.Add(kadm.Offset{Topic: topic, Partition: o.Partition, At: 1})
		}
	})
	dr, err := adm.DeleteRecords(ctx, toDelete)
	check(err, "kadm: DeleteRecords")
	check(dr.Error(), "kadm: DeleteRecords")
	starts, err := adm.ListStartOffsets(ctx, topic)
	check(err, "kadm: ListStartOffsets")
	starts.Each(func(o kadm.ListedOffset) {
		if _, deleted := toDelete.Lookup(topic, o.Partition); deleted && o.Offset != 1 {
			fail("kadm: partition %d starts at %d after DeleteRecords to 1", o.Partition, o.Offset)
		}
	})

	dg, err := adm.DeleteGroups(ctx, group)
	check(err, "kadm: DeleteGroups")
	check(dg.Error(), "kadm: DeleteGroups")
	dt, err := adm.DeleteTopics(ctx, topic)
	check(err, "kadm: DeleteTopics")
	check(dt.Error(), "kadm: DeleteTopics")
}
