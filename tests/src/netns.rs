//! A lab network: one Linux network namespace per host, each with one address in a /24
//! of the lab's own, joined by a bridge in a switch namespace of the lab's own; the test
//! process stays in the root namespace and reaches every host as the subnet's gateway.
//! Links between hosts are cut with nftables drop rules inside the hosts' namespaces
//! (silence, as across a real partition, never resets). Dropping the lab removes its
//! namespaces, links and rules; creating one first removes what dead runs left behind.
//!
//! The bridge is not in the root namespace because bridged traffic there passes the
//! root firewall (`br_netfilter`), whose FORWARD policy Docker sets to DROP: hosts would
//! not reach each other, and the lab would have to edit the machine's firewall.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::Write;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};

/// Every lab's namespaces are named `idemlab-<pid>-<n>-…`, so leftovers of a dead run
/// (its pid gone) can be recognised and removed.
const NAMESPACE_PREFIX: &str = "idemlab-";
/// The root-namespace end of a lab's gateway link: `idl<pid hex>-<n hex>` (interface
/// names have at most 15 characters).
const GATEWAY_LINK_PREFIX: &str = "idl";
/// Serialises lab creation across processes: leftover removal and the choice of a free
/// subnet must not interleave with another lab's creation.
const CREATION_LOCK: &str = "/tmp/idem-lab.lock";
/// The nftables table holding a host's cuts.
const CUTS_TABLE: &str = "idem_cuts";

/// Labs created by this process, for unique names.
static LABS: AtomicU32 = AtomicU32::new(0);

/// A node of the lab network: a host, by index, or the test process in the root
/// namespace (which reaches the hosts from the gateway address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Node {
    Host(usize),
    Client,
}

/// Packets from `from` to `to` are dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cut {
    pub from: Node,
    pub to: Node,
}

/// Whether an isolated host still reaches the test process (and its clients).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientLink {
    Kept,
    Cut,
}

/// One host of a [`Lab`]: a namespace and its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    namespace: String,
    addr: Ipv4Addr,
}

impl Host {
    pub fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `ip netns exec <namespace> <program>`: `ip` execs the program, so the child's
    /// pid is the program's and signals reach it directly.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &self.namespace])
            .arg(program);
        command
    }
}

pub struct Lab {
    name: String,
    subnet: [u8; 3],
    gateway_link: String,
    hosts: Vec<Host>,
    cuts: Mutex<BTreeSet<Cut>>,
}

impl Lab {
    /// A lab of `hosts` hosts (addresses `.2` upwards; the gateway is `.1`). Panics
    /// naming the failed command and its stderr if namespaces cannot be made (not root,
    /// no `ip`, no `nft`).
    pub fn new(hosts: usize) -> Lab {
        assert!(
            (1..=250).contains(&hosts),
            "a lab has 1 to 250 hosts, not {hosts}"
        );
        let pid = std::process::id();
        let n = LABS.fetch_add(1, Ordering::SeqCst);
        let lock = std::fs::File::create(CREATION_LOCK)
            .unwrap_or_else(|e| panic!("cannot open {CREATION_LOCK}: {e}"));
        lock.lock()
            .unwrap_or_else(|e| panic!("cannot lock {CREATION_LOCK}: {e}"));
        remove_leftovers();
        let routes = ip(&["-4", "-o", "route", "show"]);
        let subnet = free_subnet(&routes, u64::from(pid) << 16 | u64::from(n))
            .unwrap_or_else(|| panic!("no free /24 in 10.128.0.0/9; routes:\n{routes}"));
        let mut lab = Lab {
            name: format!("{NAMESPACE_PREFIX}{pid}-{n}"),
            subnet,
            gateway_link: format!("{GATEWAY_LINK_PREFIX}{pid:x}-{n:x}"),
            hosts: Vec::new(),
            cuts: Mutex::default(),
        };
        // From here on a panic drops `lab`, which removes whatever was made.
        lab.create_switch();
        drop(lock);
        for index in 0..hosts {
            lab.create_host(index);
        }
        lab
    }

    fn switch(&self) -> String {
        format!("{}-sw", self.name)
    }

    /// The address of the test process as the hosts see it.
    pub fn gateway(&self) -> Ipv4Addr {
        let [a, b, c] = self.subnet;
        Ipv4Addr::new(a, b, c, 1)
    }

    fn create_switch(&self) {
        let switch = self.switch();
        let gateway = format!("{}/24", self.gateway());
        ip(&["netns", "add", &switch]);
        ip(&["-n", &switch, "link", "set", "lo", "up"]);
        ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &switch, "link", "set", "br0", "up"]);
        ip(&[
            "link",
            "add",
            &self.gateway_link,
            "type",
            "veth",
            "peer",
            "name",
            "gw",
            "netns",
            &switch,
        ]);
        ip(&["-n", &switch, "link", "set", "gw", "master", "br0", "up"]);
        ip(&["addr", "add", &gateway, "dev", &self.gateway_link]);
        ip(&["link", "set", &self.gateway_link, "up"]);
    }

    fn create_host(&mut self, index: usize) {
        let [a, b, c] = self.subnet;
        let host = Host {
            namespace: format!("{}-h{index}", self.name),
            addr: Ipv4Addr::new(a, b, c, 2 + index as u8),
        };
        let switch = self.switch();
        let port = format!("h{index}");
        let ns = host.namespace.clone();
        ip(&["netns", "add", &ns]);
        self.hosts.push(host.clone());
        ip(&[
            "-n", &switch, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
            &ns,
        ]);
        ip(&["-n", &switch, "link", "set", &port, "master", "br0", "up"]);
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        ip(&[
            "-n",
            &ns,
            "addr",
            "add",
            &format!("{}/24", host.addr),
            "dev",
            "eth0",
        ]);
        ip(&["-n", &ns, "link", "set", "eth0", "up"]);
    }

    pub fn hosts(&self) -> usize {
        self.hosts.len()
    }

    pub fn host(&self, index: usize) -> &Host {
        &self.hosts[index]
    }

    /// The cuts in force.
    pub fn cuts(&self) -> BTreeSet<Cut> {
        self.cuts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Hosts `a` and `b` no longer reach each other.
    pub fn cut(&self, a: usize, b: usize) {
        self.add(&both_ways(Node::Host(a), Node::Host(b)));
    }

    /// Packets from `from` to `to` are dropped; the other way is open (a TCP connection
    /// either way still fails, as its segments need both directions).
    pub fn cut_one_way(&self, from: usize, to: usize) {
        self.add(&[Cut {
            from: Node::Host(from),
            to: Node::Host(to),
        }]);
    }

    /// Every link between a host of `side_a` and one of `side_b` is cut both ways.
    pub fn split(&self, side_a: &[usize], side_b: &[usize]) {
        self.add(&split_cuts(side_a, side_b));
    }

    /// `host` is cut from every other host, and from the test process if `client`
    /// says so.
    pub fn isolate(&self, host: usize, client: ClientLink) {
        self.add(&isolation_cuts(host, self.hosts(), client));
    }

    /// Every cut is removed.
    pub fn heal(&self) {
        self.replace(BTreeSet::new());
    }

    fn add(&self, cuts: &[Cut]) {
        let mut next = self.cuts();
        next.extend(cuts.iter().copied());
        self.replace(next);
    }

    /// Rewrites the rules of every host whose cuts change; each host's rules change in
    /// one nftables transaction.
    fn replace(&self, next: BTreeSet<Cut>) {
        let mut cuts = self.cuts.lock().unwrap_or_else(PoisonError::into_inner);
        let addr_of = |node: Node| match node {
            Node::Host(i) => self.hosts[i].addr,
            Node::Client => self.gateway(),
        };
        for (index, host) in self.hosts.iter().enumerate() {
            let before = ruleset(index, &cuts, addr_of);
            let after = ruleset(index, &next, addr_of);
            if before != after {
                run(
                    Command::new("ip").args(["netns", "exec", &host.namespace, "nft", "-f", "-"]),
                    Some(&after),
                )
                .unwrap_or_else(|e| panic!("{e}"));
            }
        }
        *cuts = next;
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let mut namespaces: Vec<String> = self.hosts.iter().map(|h| h.namespace.clone()).collect();
        namespaces.push(self.switch());
        for namespace in namespaces {
            remove_namespace(&namespace);
        }
        // Gone with the switch namespace (its peer), unless creation failed in between.
        let _ = run(
            Command::new("ip").args(["link", "del", &self.gateway_link]),
            None,
        );
    }
}

/// `a` and `b` cut from each other.
pub fn both_ways(a: Node, b: Node) -> [Cut; 2] {
    [Cut { from: a, to: b }, Cut { from: b, to: a }]
}

/// The cuts of a split: every host of one side from every host of the other, both ways.
pub fn split_cuts(side_a: &[usize], side_b: &[usize]) -> Vec<Cut> {
    let mut cuts = Vec::new();
    for a in side_a {
        for b in side_b.iter().filter(|b| *b != a) {
            cuts.extend(both_ways(Node::Host(*a), Node::Host(*b)));
        }
    }
    cuts
}

/// The cuts that isolate `host` among `hosts` hosts, and from the test process if
/// `client` is [`ClientLink::Cut`].
pub fn isolation_cuts(host: usize, hosts: usize, client: ClientLink) -> Vec<Cut> {
    let others: Vec<usize> = (0..hosts).filter(|h| *h != host).collect();
    let mut cuts = split_cuts(&[host], &others);
    if client == ClientLink::Cut {
        cuts.extend(both_ways(Node::Host(host), Node::Client));
    }
    cuts
}

/// The nftables script that gives host `index` exactly the rules `cuts` asks of it:
/// packets arriving from a node cut towards it are dropped at its input, and packets to
/// the test process, if cut, at its output (the root namespace gets no rules). The
/// table is created and deleted first so the script works whether or not it exists.
pub fn ruleset(index: usize, cuts: &BTreeSet<Cut>, addr_of: impl Fn(Node) -> Ipv4Addr) -> String {
    let me = Node::Host(index);
    let from: BTreeSet<Ipv4Addr> = cuts
        .iter()
        .filter(|c| c.to == me)
        .map(|c| addr_of(c.from))
        .collect();
    let to_client = cuts.contains(&Cut {
        from: me,
        to: Node::Client,
    });
    let mut script = format!("table ip {CUTS_TABLE}\ndelete table ip {CUTS_TABLE}\n");
    if from.is_empty() && !to_client {
        return script;
    }
    script.push_str(&format!("table ip {CUTS_TABLE} {{\n"));
    if !from.is_empty() {
        let sources: Vec<String> = from.iter().map(Ipv4Addr::to_string).collect();
        script.push_str(&format!(
            "  chain input {{\n    type filter hook input priority filter; policy accept;\n    \
             ip saddr {{ {} }} drop\n  }}\n",
            sources.join(", ")
        ));
    }
    if to_client {
        script.push_str(&format!(
            "  chain output {{\n    type filter hook output priority filter; policy accept;\n    \
             ip daddr {} drop\n  }}\n",
            addr_of(Node::Client)
        ));
    }
    script.push_str("}\n");
    script
}

/// A /24 in 10.128.0.0/9 that no route of the root namespace overlaps, searched from a
/// point `seed` picks so concurrent labs start apart.
pub fn free_subnet(routes: &str, seed: u64) -> Option<[u8; 3]> {
    let taken: Vec<(u32, u32)> = routes
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter_map(parse_prefix)
        .collect();
    const CANDIDATES: u64 = 128 * 256;
    let start = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) % CANDIDATES;
    (0..CANDIDATES)
        .map(|i| (start + i) % CANDIDATES)
        .map(|i| [10, 128 + (i / 256) as u8, (i % 256) as u8])
        .find(|[a, b, c]| {
            let network = u32::from(Ipv4Addr::new(*a, *b, *c, 0));
            taken.iter().all(|(net, len)| {
                // Overlap: the shorter prefix contains the other's network address.
                let shorter = (*len).min(24);
                let mask = if shorter == 0 {
                    0
                } else {
                    u32::MAX << (32 - shorter)
                };
                network & mask != net & mask
            })
        })
}

/// `a.b.c.d/len` or `a.b.c.d` (a /32) as `(network, len)`; `default` and the like are
/// not prefixes (a default route overlaps nothing the lab would use: a connected /24
/// is more specific).
fn parse_prefix(token: &str) -> Option<(u32, u32)> {
    let (addr, len) = match token.split_once('/') {
        Some((addr, len)) => (addr, len.parse().ok()?),
        None => (token, 32),
    };
    let addr: Ipv4Addr = addr.parse().ok()?;
    (len <= 32).then_some((u32::from(addr), len))
}

/// Removes the namespaces and gateway links of labs whose process is gone.
fn remove_leftovers() {
    let dead = |pid: &str| pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists();
    for line in ip(&["netns", "list"]).lines() {
        let Some(namespace) = line.split_whitespace().next() else {
            continue;
        };
        let Some(rest) = namespace.strip_prefix(NAMESPACE_PREFIX) else {
            continue;
        };
        if rest.split('-').next().is_some_and(dead) {
            remove_namespace(namespace);
        }
    }
    for line in ip(&["-o", "link", "show"]).lines() {
        // `7: idl1f2a-0@if3: <...`
        let Some(name) = line.split(':').nth(1).map(str::trim) else {
            continue;
        };
        let name = name.split('@').next().unwrap_or(name);
        let Some(rest) = name.strip_prefix(GATEWAY_LINK_PREFIX) else {
            continue;
        };
        let pid = rest
            .split('-')
            .next()
            .and_then(|hex| u32::from_str_radix(hex, 16).ok());
        if pid.is_some_and(|pid| dead(&pid.to_string())) {
            let _ = run(Command::new("ip").args(["link", "del", name]), None);
        }
    }
}

/// Kills what still runs in `namespace` (a process of this lab that outlived its
/// guard, or of a dead run) and deletes it.
fn remove_namespace(namespace: &str) {
    if let Ok(pids) = run(Command::new("ip").args(["netns", "pids", namespace]), None) {
        for pid in pids.split_whitespace() {
            let _ = run(Command::new("kill").args(["-KILL", pid]), None);
        }
    }
    let _ = run(Command::new("ip").args(["netns", "del", namespace]), None);
}

/// Runs `ip args`; panics naming the command and its stderr.
fn ip(args: &[&str]) -> String {
    run(Command::new("ip").args(args), None).unwrap_or_else(|e| {
        panic!("the lab network needs root and iproute2 (network namespaces): {e}")
    })
}

/// Runs `command` with `stdin`, returning its stdout, or an error naming the command,
/// its exit status and its stderr.
fn run(command: &mut Command, stdin: Option<&str>) -> Result<String, String> {
    let shown = format!("{command:?}");
    let mut child = command
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{shown} could not run: {e}"))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .map_err(|e| format!("{shown}: writing stdin: {e}"))?;
    }
    let output = child
        .wait_with_output()
        .map_err(|e| format!("{shown}: {e}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "{shown} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(cuts: &[Cut]) -> BTreeSet<Cut> {
        cuts.iter().copied().collect()
    }

    fn h(i: usize) -> Node {
        Node::Host(i)
    }

    #[test]
    fn a_split_cuts_every_cross_pair_both_ways_and_nothing_within_a_side() {
        let cuts = set(&split_cuts(&[0, 1, 2], &[3, 4]));
        assert_eq!(cuts.len(), 3 * 2 * 2);
        for a in [0, 1, 2] {
            for b in [3, 4] {
                assert!(cuts.contains(&Cut {
                    from: h(a),
                    to: h(b)
                }));
                assert!(cuts.contains(&Cut {
                    from: h(b),
                    to: h(a)
                }));
            }
        }
        assert!(!cuts.iter().any(|c| c.from == h(0) && c.to == h(1)));
        assert!(!cuts.iter().any(|c| c.from == h(3) && c.to == h(4)));
    }

    #[test]
    fn a_host_on_both_sides_of_a_split_is_not_cut_from_itself() {
        let cuts = split_cuts(&[0, 1], &[1, 2]);
        assert!(cuts.iter().all(|c| c.from != c.to));
    }

    #[test]
    fn an_isolated_host_keeps_or_loses_the_client_as_asked() {
        let kept = set(&isolation_cuts(1, 3, ClientLink::Kept));
        assert_eq!(
            kept,
            set(&[
                Cut {
                    from: h(1),
                    to: h(0)
                },
                Cut {
                    from: h(0),
                    to: h(1)
                },
                Cut {
                    from: h(1),
                    to: h(2)
                },
                Cut {
                    from: h(2),
                    to: h(1)
                },
            ])
        );
        let cut = set(&isolation_cuts(1, 3, ClientLink::Cut));
        assert_eq!(cut.len(), kept.len() + 2);
        assert!(cut.contains(&Cut {
            from: h(1),
            to: Node::Client
        }));
        assert!(cut.contains(&Cut {
            from: Node::Client,
            to: h(1)
        }));
    }

    fn addr(node: Node) -> Ipv4Addr {
        match node {
            Node::Host(i) => Ipv4Addr::new(10, 200, 0, 2 + i as u8),
            Node::Client => Ipv4Addr::new(10, 200, 0, 1),
        }
    }

    #[test]
    fn a_one_way_cut_is_a_drop_at_the_receiver_only() {
        let cuts = set(&[Cut {
            from: h(0),
            to: h(1),
        }]);
        let receiver = ruleset(1, &cuts, addr);
        assert!(
            receiver.contains("ip saddr { 10.200.0.2 } drop"),
            "{receiver}"
        );
        assert!(!receiver.contains("chain output"), "{receiver}");
        let sender = ruleset(0, &cuts, addr);
        assert_eq!(sender, "table ip idem_cuts\ndelete table ip idem_cuts\n");
    }

    #[test]
    fn a_host_cut_from_the_client_drops_its_packets_both_ways_in_its_own_namespace() {
        let cuts = set(&both_ways(h(2), Node::Client));
        let rules = ruleset(2, &cuts, addr);
        assert!(rules.contains("ip saddr { 10.200.0.1 } drop"), "{rules}");
        assert!(rules.contains("ip daddr 10.200.0.1 drop"), "{rules}");
    }

    #[test]
    fn no_cut_leaves_no_table() {
        let rules = ruleset(0, &BTreeSet::new(), addr);
        assert_eq!(rules, "table ip idem_cuts\ndelete table ip idem_cuts\n");
    }

    #[test]
    fn a_free_subnet_avoids_every_overlapping_route() {
        let seed = 7;
        let first = free_subnet("", seed).expect("a subnet");
        let [a, b, c] = first;
        let routes = format!(
            "default via 172.17.0.1 dev eth0\n{a}.{b}.{c}.0/24 dev x proto kernel\n\
             {a}.{b}.{}.7 dev y\n",
            c.wrapping_add(1)
        );
        let next = free_subnet(&routes, seed).expect("another subnet");
        assert_ne!(next, first);
        assert_ne!(next, [a, b, c.wrapping_add(1)]);
        // A /9 route covering the whole range leaves nothing.
        assert_eq!(free_subnet("10.128.0.0/9 dev z\n", seed), None);
        assert_eq!(free_subnet("10.0.0.0/8 dev z\n", seed), None);
    }
}
