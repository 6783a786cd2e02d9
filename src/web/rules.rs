//! Which hosts troupe fetches from for an agent: the run's `--allow-web`
//! and `[web] allow`/`deny`, narrowed per step by `powers.web`. They are
//! troupe's rules, not the sandbox's: an agent has no network either way,
//! and troupe is the one process that connects.
//!
//! A private, loopback, link-local or metadata address is refused unless
//! a rule names that host exactly (`127.0.0.1:8080`, `intranet.lan`):
//! `*` or `*.example.com` never reach one, so a public name that
//! resolves to `127.0.0.1` is refused.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde::{Deserialize, Serialize};

/// One allow or deny rule: `*`, `*.example.com`, `example.com` or
/// `example.com:8443`, lowercase.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct HostRule {
    pattern: Pattern,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Any,
    /// `*.suffix`: the suffix's subdomains, not the suffix itself.
    Below(String),
    Exact(String),
}

impl TryFrom<String> for HostRule {
    type Error = String;

    fn try_from(text: String) -> Result<HostRule, String> {
        HostRule::parse(&text)
    }
}

impl From<HostRule> for String {
    fn from(rule: HostRule) -> String {
        rule.to_string()
    }
}

impl std::fmt::Display for HostRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.pattern {
            Pattern::Any => f.write_str("*")?,
            Pattern::Below(suffix) => write!(f, "*.{suffix}")?,
            Pattern::Exact(host) if host.contains(':') => write!(f, "[{host}]")?,
            Pattern::Exact(host) => f.write_str(host)?,
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

impl HostRule {
    /// `text` as a rule, or what is wrong with it, in words.
    pub fn parse(text: &str) -> Result<HostRule, String> {
        let text = text.trim().to_ascii_lowercase();
        let bad = |why: &str| {
            format!("{text:?} is not a host rule: {why} (give HOST, HOST:PORT, *.DOMAIN or *)")
        };
        let (host, port) = split_port(&text).map_err(|why| bad(&why))?;
        let pattern = match host {
            "*" => Pattern::Any,
            _ if host.starts_with("*.") => Pattern::Below(host[2..].to_string()),
            _ => Pattern::Exact(host.to_string()),
        };
        let name = match &pattern {
            Pattern::Any => None,
            Pattern::Below(name) | Pattern::Exact(name) => Some(name.as_str()),
        };
        if let Some(name) = name
            && name.parse::<IpAddr>().is_err()
            && !is_host_name(name)
        {
            return Err(bad("the name holds characters no host name has"));
        }
        if matches!(pattern, Pattern::Below(ref name) if name.parse::<IpAddr>().is_ok()) {
            return Err(bad("an address has no subdomains"));
        }
        Ok(HostRule { pattern, port })
    }

    /// Whether it names `host` (lowercase, an address without brackets)
    /// on `port`.
    fn matches(&self, host: &str, port: u16) -> bool {
        if self.port.is_some_and(|own| own != port) {
            return false;
        }
        match &self.pattern {
            Pattern::Any => true,
            Pattern::Below(suffix) => host
                .strip_suffix(suffix.as_str())
                .is_some_and(|head| head.ends_with('.') && head.len() > 1),
            Pattern::Exact(name) => name == host,
        }
    }

    fn exact(&self) -> bool {
        matches!(self.pattern, Pattern::Exact(_))
    }

    /// Whether every host this rule names, `ceiling` names too: a step's
    /// rule within the run's.
    pub fn within(&self, ceiling: &HostRule) -> bool {
        if ceiling.port.is_some() && ceiling.port != self.port {
            return false;
        }
        match (&ceiling.pattern, &self.pattern) {
            (Pattern::Any, _) => true,
            (Pattern::Below(suffix), Pattern::Below(name) | Pattern::Exact(name)) => {
                let below = HostRule {
                    pattern: Pattern::Below(suffix.clone()),
                    port: None,
                };
                below.matches(name, 0)
                    || name == suffix && matches!(self.pattern, Pattern::Below(_))
            }
            (Pattern::Exact(own), Pattern::Exact(name)) => own == name,
            _ => false,
        }
    }
}

/// `host[:port]` split, an IPv6 address in brackets.
fn split_port(text: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = match text.strip_prefix('[') {
        Some(rest) => {
            let (address, after) = rest
                .split_once(']')
                .ok_or("an IPv6 address opened with [ is not closed")?;
            match after {
                "" => (address, None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (address, Some(port)),
                    None => return Err("only :PORT may follow ]".to_string()),
                },
            }
        }
        None => match text.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') => (host, Some(port)),
            _ => (text, None),
        },
    };
    if host.is_empty() {
        return Err("the host is empty".to_string());
    }
    let port = match port {
        None => None,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port > 0 => Some(port),
            _ => return Err(format!("{port:?} is not a port")),
        },
    };
    Ok((host, port))
}

fn is_host_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// The rules troupe fetches under for one agent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRules {
    #[serde(default)]
    pub allow: Vec<HostRule>,
    #[serde(default)]
    pub deny: Vec<HostRule>,
}

/// Why a host is not fetched from, as the agent is told.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{host}:{port} is not among the hosts this agent may fetch from ({allowed})")]
    NotAllowed {
        host: String,
        port: u16,
        allowed: String,
    },
    #[error("{host}:{port} is denied by the web rule {rule}")]
    Denied {
        host: String,
        port: u16,
        rule: String,
    },
    #[error(
        "{host} is {address}, a {kind} address, which troupe fetches from only when a rule names the host exactly"
    )]
    Private {
        host: String,
        address: IpAddr,
        kind: &'static str,
    },
}

impl HostRules {
    /// Whether any host is allowed at all: without one the web tools are
    /// not offered.
    pub fn any(&self) -> bool {
        !self.allow.is_empty()
    }

    /// The rule that lets troupe fetch from `host` on `port`, before its
    /// addresses are known.
    pub fn admit(&self, host: &str, port: u16) -> Result<Admitted, Refusal> {
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        if let Some(rule) = self.deny.iter().find(|rule| rule.matches(&host, port)) {
            return Err(Refusal::Denied {
                host,
                port,
                rule: rule.to_string(),
            });
        }
        let allowing: Vec<&HostRule> = self
            .allow
            .iter()
            .filter(|r| r.matches(&host, port))
            .collect();
        if allowing.is_empty() {
            let allowed = self
                .allow
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>();
            return Err(Refusal::NotAllowed {
                host,
                port,
                allowed: match allowed.is_empty() {
                    true => "none".to_string(),
                    false => allowed.join(", "),
                },
            });
        }
        Ok(Admitted {
            exact: allowing.iter().any(|rule| rule.exact()),
            host,
        })
    }
}

/// A host the rules let through, whose addresses are still to check.
#[derive(Debug, Clone)]
pub struct Admitted {
    pub host: String,
    /// A rule names it exactly: a private address is allowed.
    exact: bool,
}

impl Admitted {
    /// `address`, unless it is private and no rule named the host.
    pub fn check(&self, address: IpAddr) -> Result<(), Refusal> {
        match (private(address), self.exact) {
            (Some(kind), false) => Err(Refusal::Private {
                host: self.host.clone(),
                address,
                kind,
            }),
            _ => Ok(()),
        }
    }
}

/// What kind of address that is not public `address` is, if it is one.
pub fn private(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(v4) => private_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => private_v4(v4),
            None => private_v6(v6),
        },
    }
}

fn private_v4(v4: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = v4.octets();
    if v4.is_loopback() {
        Some("loopback")
    } else if v4.is_private() {
        Some("private")
    } else if v4.is_link_local() {
        Some("link-local (cloud metadata)")
    } else if v4.is_unspecified() || v4.is_broadcast() || a == 0 {
        Some("unroutable")
    } else if a == 100 && (64..128).contains(&b) {
        Some("shared (carrier-grade NAT)")
    } else if v4.is_multicast() || a >= 240 {
        Some("reserved")
    } else {
        None
    }
}

fn private_v6(v6: Ipv6Addr) -> Option<&'static str> {
    let first = v6.segments()[0];
    if v6.is_loopback() {
        Some("loopback")
    } else if v6.is_unspecified() {
        Some("unroutable")
    } else if first & 0xfe00 == 0xfc00 {
        Some("private (unique local)")
    } else if first & 0xffc0 == 0xfe80 {
        Some("link-local")
    } else if v6.is_multicast() {
        Some("reserved")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(allow: &[&str], deny: &[&str]) -> HostRules {
        let parse = |list: &[&str]| {
            list.iter()
                .map(|r| HostRule::parse(r).expect("a rule"))
                .collect()
        };
        HostRules {
            allow: parse(allow),
            deny: parse(deny),
        }
    }

    #[test]
    fn hosts_ports_and_subdomains_are_matched_as_written() {
        let rules = rules(&["docs.rs", "*.example.com", "127.0.0.1:8080"], &[]);
        assert!(rules.admit("docs.rs", 443).is_ok());
        assert!(rules.admit("DOCS.RS", 80).is_ok());
        assert!(rules.admit("api.example.com", 443).is_ok());
        assert!(rules.admit("example.com", 443).is_err());
        assert!(rules.admit("evilexample.com", 443).is_err());
        assert!(rules.admit("127.0.0.1", 8080).is_ok());
        assert!(rules.admit("127.0.0.1", 8081).is_err());
    }

    #[test]
    fn a_deny_rule_wins() {
        let rules = rules(&["*"], &["*.internal.example.com", "pastebin.com"]);
        let refused = rules.admit("pastebin.com", 443).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "pastebin.com:443 is denied by the web rule pastebin.com"
        );
        assert!(rules.admit("a.internal.example.com", 443).is_err());
        assert!(rules.admit("example.com", 443).is_ok());
    }

    #[test]
    fn private_addresses_need_the_host_named_exactly() {
        let any = rules(&["*"], &[]);
        let admitted = any.admit("localhost", 80).expect("admitted by *");
        let refused = admitted.check("127.0.0.1".parse().unwrap()).unwrap_err();
        assert!(refused.to_string().contains("loopback"), "{refused}");
        for address in [
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "0.0.0.0",
            "100.64.0.1",
        ] {
            let address: IpAddr = address.parse().unwrap();
            assert!(admitted.check(address).is_err(), "{address}");
        }
        assert!(admitted.check("93.184.216.34".parse().unwrap()).is_ok());
        let named = rules(&["127.0.0.1:8080"], &[]);
        let admitted = named.admit("127.0.0.1", 8080).expect("named");
        assert!(admitted.check("127.0.0.1".parse().unwrap()).is_ok());
    }

    #[test]
    fn a_step_rule_is_within_the_runs_only_when_the_run_names_all_it_does() {
        let rule = |text: &str| HostRule::parse(text).unwrap();
        assert!(rule("docs.rs").within(&rule("*")));
        assert!(rule("a.example.com").within(&rule("*.example.com")));
        assert!(rule("*.a.example.com").within(&rule("*.example.com")));
        assert!(!rule("example.com").within(&rule("*.example.com")));
        assert!(!rule("*").within(&rule("*.example.com")));
        assert!(!rule("docs.rs").within(&rule("docs.rs:443")));
        assert!(rule("docs.rs:443").within(&rule("docs.rs")));
    }

    #[test]
    fn bad_rules_say_what_is_wrong() {
        for bad in ["", "docs.rs:0", "docs.rs:x", "a b", "[::1", "*.1.2.3.4"] {
            let said = HostRule::parse(bad).unwrap_err();
            assert!(said.contains("is not a host rule"), "{said}");
        }
        assert_eq!(
            HostRule::parse("[::1]:8080").unwrap().to_string(),
            "[::1]:8080"
        );
    }
}
