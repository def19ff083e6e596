//! Test hosts: one network namespace per node, joined by veth pairs to a
//! bridge in the root namespace (where the clients run), and the network
//! faults between them as iptables rules inside the nodes' namespaces.
//! Needs root, as CI has. Everything is removed on drop.

use std::io;
use std::process::Command;
use strand_compat_tests::cluster::NodeHost;

/// The hosts of one run.
pub struct Net {
    run: u32,
    bridge: String,
    hosts: Vec<NodeHost>,
}

fn ip(args: &[&str]) -> io::Result<()> {
    run("ip", args)
}

fn run(prog: &str, args: &[&str]) -> io::Result<()> {
    let out = Command::new(prog).args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{prog} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

impl Net {
    /// `nodes` hosts 10.77.R.11, .12, ... in namespaces `strand-chaos-R-N`,
    /// with the bridge (the clients' side) at 10.77.R.1, R from `run`.
    pub fn create(run: u32, nodes: usize) -> io::Result<Net> {
        let r = run % 250;
        let bridge = format!("scb{r}");
        let mut net = Net {
            run: r,
            bridge: bridge.clone(),
            hosts: Vec::new(),
        };
        // A run killed before its cleanup left its devices behind.
        net.remove();
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&["addr", "add", &format!("10.77.{r}.1/24"), "dev", &bridge])?;
        ip(&["link", "set", &bridge, "up"])?;
        for i in 1..=nodes {
            let ns = format!("strand-chaos-{r}-{i}");
            let outer = format!("sc{r}h{i}");
            let inner = format!("sc{r}n{i}");
            let addr = format!("10.77.{r}.{}", 10 + i);
            ip(&["netns", "add", &ns])?;
            ip(&[
                "link", "add", &outer, "type", "veth", "peer", "name", &inner,
            ])?;
            ip(&["link", "set", &inner, "netns", &ns])?;
            ip(&["link", "set", &outer, "master", &bridge])?;
            ip(&["link", "set", &outer, "up"])?;
            let in_ns = |args: &[&str]| {
                let mut all = vec!["netns", "exec", &ns, "ip"];
                all.extend_from_slice(args);
                ip(&all)
            };
            in_ns(&["addr", "add", &format!("{addr}/24"), "dev", &inner])?;
            in_ns(&["link", "set", &inner, "up"])?;
            in_ns(&["link", "set", "lo", "up"])?;
            net.hosts.push(NodeHost {
                ip: addr,
                netns: ns,
            });
        }
        Ok(net)
    }

    pub fn hosts(&self) -> &[NodeHost] {
        &self.hosts
    }

    fn host(&self, node: i32) -> &NodeHost {
        &self.hosts[(node - 1) as usize]
    }

    fn iptables(&self, node: i32, args: &[&str]) -> io::Result<()> {
        let ns = self.host(node).netns.clone();
        let mut all = vec!["netns", "exec", ns.as_str(), "iptables", "-w"];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// Drops everything between `a` and `b`, both ways.
    pub fn cut(&self, a: i32, b: i32) -> io::Result<()> {
        for (x, y) in [(a, b), (b, a)] {
            let peer = self.host(y).ip.clone();
            self.iptables(x, &["-A", "INPUT", "-s", &peer, "-j", "DROP"])?;
            self.iptables(x, &["-A", "OUTPUT", "-d", &peer, "-j", "DROP"])?;
        }
        Ok(())
    }

    /// Drops `percent` of the packets `from` sends to `to` (one way).
    pub fn lossy(&self, from: i32, to: i32, percent: u32) -> io::Result<()> {
        let peer = self.host(to).ip.clone();
        let p = format!("{:.2}", percent as f64 / 100.0);
        self.iptables(
            from,
            &[
                "-A",
                "OUTPUT",
                "-d",
                &peer,
                "-m",
                "statistic",
                "--mode",
                "random",
                "--probability",
                &p,
                "-j",
                "DROP",
            ],
        )
    }

    /// The device `node` sends through (its end of the veth pair).
    fn device(&self, node: i32) -> String {
        format!("sc{}n{node}", self.run)
    }

    /// Slows everything `node` sends to a token bucket of 256 kbit/s that
    /// queues up to 2 s before it drops: its packets arrive late rather
    /// than not at all (this kernel has no netem to delay them outright).
    pub fn slow(&self, node: i32) -> io::Result<()> {
        let ns = self.host(node).netns.clone();
        let dev = self.device(node);
        run(
            "ip",
            &[
                "netns", "exec", &ns, "tc", "qdisc", "replace", "dev", &dev, "root", "tbf", "rate",
                "256kbit", "burst", "16kbit", "latency", "2s",
            ],
        )
    }

    /// Removes every rule and queue: the network is whole again.
    pub fn heal(&self) -> io::Result<()> {
        for i in 1..=self.hosts.len() as i32 {
            self.iptables(i, &["-F"])?;
            let ns = self.host(i).netns.clone();
            let dev = self.device(i);
            // Fails when there is nothing to remove, which is the usual case.
            let _ = run(
                "ip",
                &[
                    "netns", "exec", &ns, "tc", "qdisc", "del", "dev", &dev, "root",
                ],
            );
        }
        Ok(())
    }

    fn remove(&self) {
        for i in 1..=16 {
            let _ = ip(&["netns", "del", &format!("strand-chaos-{}-{i}", self.run)]);
        }
        let _ = ip(&["link", "del", &self.bridge]);
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.remove();
    }
}
