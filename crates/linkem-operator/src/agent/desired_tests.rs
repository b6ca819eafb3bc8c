use super::*;
use crate::chaos::LinkChaosSpec;
use linkem_cni::config::LinkSpec as CniLinkSpec;

const NODE: &str = "node-a";

fn emulator() -> Emulator {
    Emulator {
        name: "cni-c1-eth0".into(),
        pod: pod("web-0"),
        pod_uid: None,
        ifname: "eth0".into(),
        socket: "/r/cni-c1-eth0.sock".into(),
        base: CniLinkSpec {
            link: Some("delay 1ms".into()),
            b_to_a: Some("rate 100mbit".into()),
            ..CniLinkSpec::default()
        },
        pid: 9,
    }
}

fn pod(name: &str) -> PodKey {
    PodKey {
        namespace: "ns".into(),
        name: name.into(),
    }
}

/// A resource from its spec in YAML, created at `created_s`, selecting web-0 on NODE.
fn chaos(name: &str, created_s: i128, spec: &str) -> ChaosView {
    let spec: LinkChaosSpec = serde_yaml::from_str(spec).unwrap();
    let mut lc = LinkChaos::new(name, spec);
    lc.metadata.namespace = Some("ns".into());
    let mut c = ChaosView::from_resource(&lc);
    c.created_ns = created_s * 1_000_000_000;
    c.expires_ns = lc
        .spec
        .duration
        .as_deref()
        .map(|d| c.created_ns + i128::from(words::go_duration_ns(d).unwrap()));
    c.selected = vec![PodRef {
        namespace: "ns".into(),
        name: "web-0".into(),
        node: Some(NODE.into()),
    }];
    c
}

const SELECTOR: &str = "selector: {labelSelectors: {app: web}}\nmode: all\n";

fn want(chaos: &[ChaosView], now_s: i128) -> (Result<Desired, Box<Refusal>>, Option<i128>) {
    let (layers, refused, wake) = layers(chaos, &pod("web-0"), "eth0", NODE, now_s * 1_000_000_000);
    assert!(refused.is_empty(), "{refused:?}");
    let mut files = |n: &str| -> Result<String, String> { Err(format!("'{n}': no such file")) };
    (desired(&emulator(), &layers, &mut files), wake)
}

/// The words as a set of link words, order aside (canonical order is linkem's).
fn parsed(words: &str) -> String {
    LinkSpec::parse(words).unwrap().link.to_string()
}

#[test]
fn without_resources_the_base_is_desired() {
    let (d, wake) = want(&[], 100);
    let d = d.unwrap();
    assert_eq!(d.a_to_b, parsed("delay 1ms"));
    assert_eq!(d.b_to_a, parsed("delay 1ms rate 100mbit"));
    assert!(d.resources.is_empty() && wake.is_none());
}

#[test]
fn a_resource_goes_over_the_base_on_the_pods_egress() {
    let c = chaos(
        "slow",
        10,
        &format!("{SELECTOR}action: delay\ndelay: {{latency: 20ms}}\n"),
    );
    let d = want(&[c], 11).0.unwrap();
    // The pod's egress is a-to-b; its delay replaces the base's, once.
    assert_eq!(d.a_to_b, parsed("delay 20ms"));
    assert_eq!(d.a_to_b.matches("delay").count(), 1, "{}", d.a_to_b);
    assert_eq!(d.b_to_a, parsed("delay 1ms rate 100mbit"));
    assert_eq!(d.resources, ["ns/slow"]);
}

#[test]
fn several_resources_apply_in_creation_order_later_words_winning() {
    let later = chaos(
        "later",
        20,
        &format!("{SELECTOR}action: delay\ndelay: {{latency: 50ms}}\ndirection: both\n"),
    );
    let earlier = chaos(
        "earlier",
        10,
        &format!("{SELECTOR}action: loss\nloss: {{loss: \"5\"}}\ndelay: {{latency: 30ms}}\n"),
    );
    let d = want(&[later, earlier], 30).0.unwrap();
    assert_eq!(d.resources, ["ns/earlier", "ns/later"]);
    assert_eq!(d.a_to_b, parsed("delay 50ms loss 5%"));
    assert_eq!(d.b_to_a, parsed("delay 50ms rate 100mbit"));
}

#[test]
fn expired_deleted_unselected_or_elsewhere_resources_do_not_apply() {
    let spec = format!("{SELECTOR}action: delay\ndelay: {{latency: 20ms}}\nduration: 10s\n");
    let c = chaos("timed", 100, &spec);
    let (d, wake) = want(std::slice::from_ref(&c), 105);
    assert_eq!(d.unwrap().resources, ["ns/timed"]);
    assert_eq!(
        wake,
        Some(110 * 1_000_000_000),
        "the agent wakes when the duration runs out"
    );
    assert!(want(std::slice::from_ref(&c), 110)
        .0
        .unwrap()
        .resources
        .is_empty());
    let mut gone = chaos("gone", 100, &spec.replace("duration: 10s\n", ""));
    gone.gone = true;
    let mut elsewhere = chaos("elsewhere", 100, &spec.replace("duration: 10s\n", ""));
    elsewhere.selected[0].node = Some("node-b".into());
    let mut other = chaos("other", 100, &spec.replace("duration: 10s\n", ""));
    other.selected[0].name = "web-1".into();
    let d = want(&[gone, elsewhere, other], 105).0.unwrap();
    assert!(d.resources.is_empty(), "{d:?}");
}

#[test]
fn the_controllers_start_and_expiry_win_over_the_whole_second_of_creation() {
    let spec: LinkChaosSpec = serde_yaml::from_str(&format!(
        "{SELECTOR}action: delay\ndelay: {{latency: 20ms}}\nduration: 10s\n"
    ))
    .unwrap();
    let mut lc = LinkChaos::new("timed", spec);
    lc.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2026-11-29T14:00:00Z".parse().unwrap(),
    ));
    let s = |t: &str| t.parse::<jiff::Timestamp>().unwrap().as_nanosecond();
    let c = ChaosView::from_resource(&lc);
    assert_eq!(c.created_ns, s("2026-11-29T14:00:00Z"));
    assert_eq!(c.expires_ns, Some(s("2026-11-29T14:00:10Z")));
    lc.status = Some(crate::chaos::LinkChaosStatus {
        started_at: Some("2026-11-29T14:00:00.25Z".into()),
        expires_at: Some("2026-11-29T14:00:10.25Z".into()),
        ..Default::default()
    });
    let c = ChaosView::from_resource(&lc);
    assert_eq!(c.created_ns, s("2026-11-29T14:00:00.25Z"));
    assert_eq!(c.expires_ns, Some(s("2026-11-29T14:00:10.25Z")));
}

#[test]
fn schedule_steps_join_at_their_instants() {
    let spec = format!(
        "{SELECTOR}action: delay\ndelay: {{latency: 20ms}}\nlinkem:\n  schedule:\n  \
         - {{at: 5s, words: \"delay 80ms\", direction: to}}\n  - {{at: 8s, words: \"loss 10%\"}}\n"
    );
    let c = chaos("steps", 100, &spec);
    let (d, wake) = want(std::slice::from_ref(&c), 104);
    assert_eq!(d.unwrap().a_to_b, parsed("delay 20ms"));
    assert_eq!(wake, Some(105 * 1_000_000_000));
    let (d, wake) = want(std::slice::from_ref(&c), 106);
    let d = d.unwrap();
    assert_eq!(
        (d.a_to_b.as_str(), wake),
        (parsed("delay 80ms").as_str(), Some(108 * 1_000_000_000))
    );
    let d = want(&[c], 109).0.unwrap();
    assert_eq!(d.a_to_b, parsed("delay 80ms loss 10%"));
    assert_eq!(d.b_to_a, parsed("delay 1ms rate 100mbit loss 10%"));
}

#[test]
fn a_refused_word_names_its_resource_and_its_place_in_the_resources_words() {
    let layer = Layer {
        resource: "ns/bad".into(),
        egress: vec![vec![
            "loss".into(),
            "1%".into(),
            "delay".into(),
            "20xs".into(),
        ]],
        ingress: vec![vec![]],
        rules: None,
        link_words: true,
    };
    let mut files = |n: &str| -> Result<String, String> { Err(format!("'{n}': no such file")) };
    let r = desired(&emulator(), &[layer], &mut files).unwrap_err();
    assert_eq!(r.resource.as_deref(), Some("ns/bad"));
    assert_eq!((r.word.as_deref(), r.position), (Some("20xs"), Some(4)));
    assert_eq!(
        (r.direction.as_str(), r.words.as_str()),
        ("egress", "loss 1% delay 20xs")
    );
}

#[test]
fn a_spec_that_cannot_apply_is_reported_not_layered() {
    let c = chaos("part", 10, &format!("{SELECTOR}action: delay\ndelay: {{latency: 20ms}}\ntarget: {{mode: all, selector: {{namespaces: [x]}}}}\n"));
    let (l, refused, _) = layers(&[c], &pod("web-0"), "eth0", NODE, 11_000_000_000);
    assert!(l.is_empty());
    assert_eq!(refused.len(), 1);
    assert_eq!(
        (refused[0].0.as_str(), refused[0].1.field.as_str()),
        ("ns/part", "target")
    );
}

#[test]
fn a_trace_is_named_by_its_content() {
    let spec = format!("{SELECTOR}linkem:\n  link: loss 1%\n  trace: {{egress: \"1\\n2\\n\"}}\n");
    let c = chaos("traced", 10, &spec);
    let (l, refused, _) = layers(
        std::slice::from_ref(&c),
        &pod("web-0"),
        "eth0",
        NODE,
        11_000_000_000,
    );
    assert!(refused.is_empty(), "{refused:?}");
    let name = trace_file_name("1\n2\n");
    assert!(crate::agent::reconcile::bare(&name), "{name}");
    assert_ne!(name, trace_file_name("1\n3\n"));
    let want: Vec<String> = vec!["loss".into(), "1%".into(), "trace".into(), name.clone()];
    assert_eq!(l[0].egress, vec![want]);
    let texts = traces_of(&[c], &l);
    assert_eq!(texts.get(&name).map(String::as_str), Some("1\n2\n"));
    let mut files = |n: &str| -> Result<String, String> {
        texts.get(n).cloned().ok_or_else(|| format!("'{n}'"))
    };
    let d = desired(&emulator(), &l, &mut files).unwrap();
    assert!(d.a_to_b.contains(&format!("trace {name}")), "{}", d.a_to_b);
}

/// NetworkChaos's `device` names the pod's interface: the resource shapes
/// that interface's emulator and leaves the pod's others alone.
#[test]
fn a_device_names_the_one_interface_it_impairs() {
    let spec = format!("{SELECTOR}action: delay\ndelay: {{latency: 20ms}}\ndevice: net1\n");
    let c = chaos("on-net1", 10, &spec);
    let on = |ifname: &str| {
        layers(
            std::slice::from_ref(&c),
            &pod("web-0"),
            ifname,
            NODE,
            11_000_000_000,
        )
        .0
    };
    assert_eq!(
        on("net1").len(),
        1,
        "the named interface takes the resource"
    );
    assert!(
        on("eth0").is_empty(),
        "another interface of the pod keeps its link"
    );
}
