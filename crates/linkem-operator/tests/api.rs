//! The LinkChaos resource and the deploy/ manifests against a real
//! kube-apiserver (tests/common): the CRD is Established, the examples are
//! accepted with the meaning they were written with, malformed specs are
//! refused by the CRD's schema naming the field, every object of deploy/ passes
//! a server-side dry run, the RBAC grants each component what it does and no
//! more, and two writers of `status.pods` keep each other's keys.
//!
//! One control plane serves the whole file (`ControlPlane::shared`); each test
//! uses names of its own.

mod common;

use anyhow::{bail, Context, Result};
use common::{install_crd, ControlPlane};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{pinned_kind, Scope};
use kube::Client;
use linkem_operator::chaos::{LinkChaos, LinkChaosSpec};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// The YAML documents of a file, as JSON values (empty documents skipped).
fn documents(path: &Path) -> Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut docs = Vec::new();
    for de in serde_yaml::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(de)
            .with_context(|| format!("parsing {}", path.display()))?;
        if !v.is_null() {
            docs.push(v);
        }
    }
    Ok(docs)
}

fn yaml_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    files.sort();
    Ok(files)
}

async fn client_with_crd() -> Result<Client> {
    let client = ControlPlane::shared().client().await?;
    install_crd(&client).await?;
    Ok(client)
}

fn chaos_api(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<LinkChaos>(&()))
}

/// The Status of a refused request.
fn api_error(e: kube::Error) -> Result<Box<kube::core::Status>> {
    match e {
        kube::Error::Api(s) => Ok(s),
        other => bail!("not an API error: {other}"),
    }
}

#[tokio::test]
async fn crd_is_established_with_the_generated_schema() -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let client = client_with_crd().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let crd = crds.get("linkchaos.linkem.dev").await?;
    let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
    for kind in ["Established", "NamesAccepted"] {
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == kind && c.status == "True"),
            "condition {kind} not True: {conditions:?}"
        );
    }
    let v = &crd.spec.versions[0];
    assert_eq!(v.name, "v1alpha1");
    assert!(
        v.subresources.as_ref().is_some_and(|s| s.status.is_some()),
        "the status subresource is on"
    );
    Ok(())
}

/// Each example, created and read back, has the spec it was written with,
/// field for field: the server pruned nothing the types do not know.
#[tokio::test]
async fn examples_are_accepted_with_their_meaning() -> Result<()> {
    let client = client_with_crd().await?;
    let files = yaml_files(&deploy_dir().join("examples"))?;
    let names: Vec<String> = files
        .iter()
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    for want in ["bandwidth", "delay", "linkem", "loss"] {
        assert!(
            names.iter().any(|n| n == want),
            "deploy/examples/{want}.yaml is missing"
        );
    }
    let api = chaos_api(&client, "default");
    for path in &files {
        for doc in documents(path)? {
            assert_eq!(
                doc["apiVersion"],
                "linkem.dev/v1alpha1",
                "{}",
                path.display()
            );
            assert_eq!(doc["kind"], "LinkChaos", "{}", path.display());
            let obj: DynamicObject = serde_json::from_value(doc.clone())?;
            let name = obj
                .metadata
                .name
                .clone()
                .context("an example without a name")?;
            let created = api
                .create(&PostParams::default(), &obj)
                .await
                .with_context(|| format!("creating {}", path.display()))?;
            assert_eq!(created.metadata.name.as_deref(), Some(name.as_str()));
            let back = api.get(&name).await?;
            assert_eq!(
                back.data["spec"],
                doc["spec"],
                "{}: the spec read back differs",
                path.display()
            );
            let typed: LinkChaosSpec = serde_json::from_value(back.data["spec"].clone())?;
            let written: LinkChaosSpec = serde_json::from_value(doc["spec"].clone())?;
            assert_eq!(typed, written, "{}", path.display());
        }
    }
    Ok(())
}

/// A valid spec with one field spoiled is refused (422) by the schema, and the
/// message names the field.
#[tokio::test]
async fn malformed_specs_are_refused_naming_the_field() -> Result<()> {
    let client = client_with_crd().await?;
    let api = chaos_api(&client, "default");
    let cases = [
        (
            "delay",
            json!({"delay": {"latency": "20xs"}}),
            "spec.delay.latency",
        ),
        ("mode", json!({"mode": "sometimes"}), "spec.mode"),
        ("loss", json!({"loss": {"loss": "abc"}}), "spec.loss.loss"),
        (
            "rate",
            json!({"bandwidth": {"rate": "10mbitt", "limit": 100, "buffer": 10000}}),
            "spec.bandwidth.rate",
        ),
    ];
    for (name, spoil, field) in cases {
        let mut spec = json!({
            "selector": {"labelSelectors": {"app": "web"}},
            "mode": "all",
            "delay": {"latency": "20ms"},
        });
        for (k, v) in spoil.as_object().context("a case is an object")? {
            spec[k] = v.clone();
        }
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "linkem.dev/v1alpha1",
            "kind": "LinkChaos",
            "metadata": {"name": format!("bad-{name}")},
            "spec": spec,
        }))?;
        let err = match api.create(&PostParams::default(), &obj).await {
            Ok(_) => bail!("the spec with a bad {field} was accepted"),
            Err(e) => api_error(e)?,
        };
        assert_eq!(err.code, 422, "{field}: {}", err.message);
        assert!(
            err.message.contains(field),
            "the refusal does not name {field}: {}",
            err.message
        );
    }
    Ok(())
}

/// Every object of deploy/*.yaml, applied with `dryRun=All`: validated and
/// admitted by the server, stored nowhere. Namespaces are created for real
/// first, since a namespaced object's dry run needs its namespace.
#[tokio::test]
async fn deploy_manifests_pass_a_server_side_dry_run() -> Result<()> {
    let client = client_with_crd().await?;
    let mut objects = Vec::new();
    for path in yaml_files(&deploy_dir())? {
        for doc in documents(&path)? {
            objects.push((path.clone(), serde_json::from_value::<DynamicObject>(doc)?));
        }
    }
    let kinds: Vec<String> = objects
        .iter()
        .filter_map(|(_, o)| o.types.as_ref().map(|t| t.kind.clone()))
        .collect();
    for want in [
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "DaemonSet",
        "Deployment",
    ] {
        assert!(
            kinds.iter().any(|k| k == want),
            "no {want} in deploy/: {kinds:?}"
        );
    }
    for pass in ["namespaces", "dry run"] {
        for (path, obj) in &objects {
            let is_ns = obj.types.as_ref().is_some_and(|t| t.kind == "Namespace");
            if (pass == "namespaces") == is_ns {
                apply(&client, path, obj, !is_ns).await?;
            }
        }
    }
    Ok(())
}

/// Server-side apply of one object of `path` (with `dryRun=All` when `dry_run`).
async fn apply(client: &Client, path: &Path, obj: &DynamicObject, dry_run: bool) -> Result<()> {
    let types = obj
        .types
        .as_ref()
        .context("an object without apiVersion/kind")?;
    let gvk = GroupVersionKind::try_from(types)?;
    let (ar, caps) = pinned_kind(client, &gvk).await?;
    let api: Api<DynamicObject> = match (&caps.scope, &obj.metadata.namespace) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &ar),
        (Scope::Namespaced, None) => {
            bail!("{}: {} without a namespace", path.display(), types.kind)
        }
        (Scope::Cluster, _) => Api::all_with(client.clone(), &ar),
    };
    let name = obj
        .metadata
        .name
        .clone()
        .context("an object without a name")?;
    let mut pp = PatchParams::apply("linkem-tests").force();
    if dry_run {
        pp = pp.dry_run();
    }
    api.patch(&name, &pp, &Patch::Apply(obj))
        .await
        .with_context(|| format!("{}: {} {name}", path.display(), types.kind))?;
    Ok(())
}

/// Whether the service account `linkem-system/NAME` may `verb` the resource.
async fn may(client: &Client, account: &str, verb: &str, resource: &str) -> Result<bool> {
    let (group, resource) = resource.split_once('/').unwrap_or(("", resource));
    let (resource, subresource) = match resource.split_once('.') {
        Some((r, s)) => (r, Some(s.to_string())),
        None => (resource, None),
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!("system:serviceaccount:linkem-system:{account}")),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                "system:serviceaccounts:linkem-system".into(),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource,
                verb: Some(verb.into()),
                namespace: Some("default".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// deploy/rbac.yaml, applied for real, grants the controller and the agent
/// what they do (asked of the API server's own RBAC authorizer) and nothing
/// that changes a spec, a pod or a node.
#[tokio::test]
async fn rbac_grants_each_what_it_does_and_no_more() -> Result<()> {
    let client = client_with_crd().await?;
    for file in ["namespace.yaml", "rbac.yaml"] {
        let path = deploy_dir().join(file);
        for doc in documents(&path)? {
            apply(&client, &path, &serde_json::from_value(doc)?, false).await?;
        }
    }
    let common = [
        ("get", "linkem.dev/linkchaos"),
        ("list", "linkem.dev/linkchaos"),
        ("watch", "linkem.dev/linkchaos"),
        ("patch", "linkem.dev/linkchaos.status"),
        ("list", "pods"),
        ("watch", "pods"),
    ];
    let controller_only = [("list", "nodes"), ("watch", "nodes")];
    let nobody = [
        ("create", "linkem.dev/linkchaos"),
        ("update", "linkem.dev/linkchaos"),
        ("patch", "linkem.dev/linkchaos"),
        ("delete", "linkem.dev/linkchaos"),
        ("update", "linkem.dev/linkchaos.status"),
        ("create", "pods"),
        ("patch", "pods"),
        ("delete", "pods"),
        ("get", "secrets"),
        ("patch", "nodes"),
    ];
    // The authorizer learns of new bindings through its informers: a moment.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !may(&client, "linkem-node", "list", "pods").await? {
        assert!(
            std::time::Instant::now() < deadline,
            "the agent's binding never took effect"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    for account in ["linkem-controller", "linkem-node"] {
        for (verb, resource) in common {
            assert!(
                may(&client, account, verb, resource).await?,
                "{account} may not {verb} {resource}"
            );
        }
        for (verb, resource) in controller_only {
            let allowed = may(&client, account, verb, resource).await?;
            assert_eq!(
                allowed,
                account == "linkem-controller",
                "{account} {verb} {resource}"
            );
        }
        for (verb, resource) in nobody {
            assert!(
                !may(&client, account, verb, resource).await?,
                "{account} may {verb} {resource}"
            );
        }
    }
    Ok(())
}

/// The controller and each node's agent merge-patch their own keys of the
/// status; two agents writing `pods` at once keep both entries, and the
/// controller's `phase` and `selected` stay.
#[tokio::test]
async fn status_pods_keys_of_two_writers_both_stay() -> Result<()> {
    let cp = ControlPlane::shared();
    let client = client_with_crd().await?;
    let api = chaos_api(&client, "default");
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "linkem.dev/v1alpha1",
        "kind": "LinkChaos",
        "metadata": {"name": "two-writers"},
        "spec": {"selector": {"labelSelectors": {"app": "web"}}, "mode": "all",
                 "delay": {"latency": "20ms"}},
    }))?;
    api.create(&PostParams::default(), &obj).await?;
    let pp = PatchParams::default();
    let controller = json!({"status": {"phase": "Running", "selected": [
        {"namespace": "default", "name": "web-1", "node": "node-a"},
        {"namespace": "default", "name": "web-2", "node": "node-b"}]}});
    api.patch_status("two-writers", &pp, &Patch::Merge(&controller))
        .await?;
    // Two clients, as two agent processes would have.
    let (a, b) = (cp.client().await?, cp.client().await?);
    let (api_a, api_b) = (chaos_api(&a, "default"), chaos_api(&b, "default"));
    let entry = |node: &str| json!({"node": node, "state": "Applied", "at": "2026-11-29T13:00:00.000000001Z"});
    let patch_a = Patch::Merge(json!({"status": {"pods": {"default/web-1": entry("node-a")}}}));
    let patch_b = Patch::Merge(json!({"status": {"pods": {"default/web-2": entry("node-b")}}}));
    let (ra, rb) = tokio::join!(
        api_a.patch_status("two-writers", &pp, &patch_a),
        api_b.patch_status("two-writers", &pp, &patch_b),
    );
    ra?;
    rb?;
    let typed: Api<LinkChaos> = Api::default_namespaced(client);
    let status = typed
        .get_status("two-writers")
        .await?
        .status
        .context("no status")?;
    let pods = status.pods.context("no status.pods")?;
    assert_eq!(
        pods.keys().collect::<Vec<_>>(),
        ["default/web-1", "default/web-2"]
    );
    assert_eq!(pods["default/web-2"].node, "node-b");
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert_eq!(status.selected.map(|s| s.len()), Some(2));
    Ok(())
}
