//! [`Topology`]: what the web page draws as the run's graph, given by the
//! front end that starts the emulator (a bridge: its two interfaces and its
//! link; `linkem host`: "host" and "network"; `linkem shell`: "shell" and
//! "host"; a lab: its nodes and the links emulated here), as `/api/state`'s
//! `topology` object.

use serde::Serialize;

/// The nodes and links of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Topology {
    pub nodes: Vec<Node>,
    pub links: Vec<Link>,
    /// The page's `front` when the model's does not say it ("lab": a lab's
    /// emulator runs as a bridge of pairs).
    #[serde(skip)]
    pub front: Option<&'static str>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Node {
    pub name: String,
    /// "interface" for a bridge's ends, else the lab file's kind ("linux", "bridge", "host", ...).
    pub kind: String,
}

/// A link between node `a` (its interface `a_if`) and node `b`, named as
/// the control socket names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Link {
    pub name: String,
    pub a: String,
    pub b: String,
    pub a_if: String,
    pub b_if: String,
}

impl Topology {
    /// One link `name` between two nodes, each (name, kind): `a` (its
    /// interface `a_if`) and `b`.
    pub fn pair(name: &str, [a, b]: [(&str, &str); 2], [a_if, b_if]: [&str; 2]) -> Topology {
        let node = |(name, kind): (&str, &str)| Node {
            name: name.to_string(),
            kind: kind.to_string(),
        };
        let (a, b) = (node(a), node(b));
        Topology {
            links: vec![Link {
                name: name.to_string(),
                a: a.name.clone(),
                b: b.name.clone(),
                a_if: a_if.to_string(),
                b_if: b_if.to_string(),
            }],
            nodes: vec![a, b],
            front: None,
        }
    }

    /// A plain bridge's: its interfaces are the nodes.
    pub fn bridge(name: &str, if_a: &str, if_b: &str) -> Topology {
        let kind = "interface";
        Topology::pair(name, [(if_a, kind), (if_b, kind)], [if_a, if_b])
    }

    /// Several pairs of interfaces (`--pair ... --pair ...`): (link, IF_A, IF_B) each.
    pub fn pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>) -> Topology {
        let mut t = Topology::default();
        for (name, if_a, if_b) in pairs {
            let one = Topology::bridge(name, if_a, if_b);
            t.nodes.extend(one.nodes);
            t.links.extend(one.links);
        }
        t
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bridge_is_two_interfaces_and_one_link() {
        let t = Topology::bridge("va-vb", "va", "vb").to_json();
        assert_eq!(
            t,
            serde_json::json!({
                "nodes": [{"name": "va", "kind": "interface"}, {"name": "vb", "kind": "interface"}],
                "links": [{"name": "va-vb", "a": "va", "b": "vb", "a_if": "va", "b_if": "vb"}],
            })
        );
        let p = Topology::pairs([("a-b", "a", "b"), ("c-d", "c", "d")]);
        assert_eq!((p.nodes.len(), p.links.len()), (4, 2));
        assert_eq!(p.links[1].b_if, "d");
    }
}
