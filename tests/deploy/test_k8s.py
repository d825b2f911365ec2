"""Offline schema check of deploy/k8s: every object is validated against the Kubernetes API types
of Debian's python3-kubernetes (the OpenAPI-generated models: every field known, every type
right, every required field present), then against the topology the cluster needs (selectors
match, ports and volumes referenced exist, stores on local NVMe volume claims, compute asks for
a GPU and finds the stores through their headless Service, the router behind a Service).
"""
import glob
import os
import re
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import testlib  # noqa: E402

K8S = os.path.join(testlib.REPO, 'deploy', 'k8s')

try:
    import yaml
    import kubernetes.client as k8s
except ImportError as e:  # pragma: no cover
    raise unittest.SkipTest(f'{e.name} missing (apt-get install python3-yaml python3-kubernetes; '
                            'scripts/install-deps.sh does)')

KINDS = {
    ('v1', 'Namespace'): 'V1Namespace',
    ('v1', 'Service'): 'V1Service',
    ('v1', 'PersistentVolumeClaim'): 'V1PersistentVolumeClaim',
    ('v1', 'PersistentVolume'): 'V1PersistentVolume',
    ('v1', 'ConfigMap'): 'V1ConfigMap',
    ('apps/v1', 'Deployment'): 'V1Deployment',
    ('apps/v1', 'StatefulSet'): 'V1StatefulSet',
    ('batch/v1', 'Job'): 'V1Job',
    ('storage.k8s.io/v1', 'StorageClass'): 'V1StorageClass',
    ('networking.k8s.io/v1', 'NetworkPolicy'): 'V1NetworkPolicy',
}
PRIMITIVES = {'str': str, 'int': int, 'bool': bool, 'float': (int, float)}


def validate(value, type_name, path, errors):
    """Appends 'path: problem' for every deviation of `value` from API type `type_name`."""
    m = re.fullmatch(r'list\[(.+)\]', type_name)
    if m:
        if not isinstance(value, list):
            errors.append(f'{path}: expected a list, got {type(value).__name__}')
            return
        for i, v in enumerate(value):
            validate(v, m.group(1), f'{path}[{i}]', errors)
        return
    m = re.fullmatch(r'dict\(str, (.+)\)', type_name)
    if m:
        if not isinstance(value, dict):
            errors.append(f'{path}: expected a map, got {type(value).__name__}')
            return
        # Resource quantities are int-or-string in the API (the client models them as str).
        inner = 'object' if re.search(r'\.(limits|requests|capacity)$', path) else m.group(1)
        for k, v in value.items():
            validate(v, inner, f'{path}.{k}', errors)
        return
    if type_name == 'object':  # IntOrString, quantities, raw extensions
        if not isinstance(value, (str, int, float, dict)):
            errors.append(f'{path}: expected a string or number, got {type(value).__name__}')
        return
    if type_name in PRIMITIVES:
        ok = isinstance(value, PRIMITIVES[type_name]) and not (type_name != 'bool' and isinstance(value, bool))
        if not ok:
            errors.append(f'{path}: expected {type_name}, got {type(value).__name__} {value!r}')
        return
    cls = getattr(k8s, type_name)
    if not isinstance(value, dict):
        errors.append(f'{path}: expected a {type_name} object, got {type(value).__name__}')
        return
    by_json = {j: a for a, j in cls.attribute_map.items()}
    for key, v in value.items():
        if key not in by_json:
            errors.append(f'{path}: unknown field "{key}" in {type_name}')
            continue
        validate(v, cls.openapi_types[by_json[key]], f'{path}.{key}', errors)
    # Required fields: the generated setters refuse None for them.
    for attr, j in cls.attribute_map.items():
        if j in value:
            continue
        try:
            getattr(cls, attr).fset(make_object(type_name), None)
        except ValueError:
            errors.append(f'{path}: required field "{j}" of {type_name} missing')
        except AttributeError:
            pass


def make_object(cls_name):
    cls = getattr(k8s, cls_name)
    obj = cls.__new__(cls)
    obj.local_vars_configuration = k8s.Configuration()
    return obj


def load_all():
    docs = []
    for path in sorted(glob.glob(os.path.join(K8S, '*.yaml'))):
        if os.path.basename(path) == 'kustomization.yaml':
            continue
        with open(path) as f:
            for d in yaml.safe_load_all(f):
                if d:
                    docs.append((os.path.basename(path), d))
    return docs


class K8sManifestTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = load_all()
        cls.by_kind = {}
        for f, d in cls.docs:
            cls.by_kind.setdefault(d['kind'], {})[d['metadata']['name']] = d

    def test_validator_rejects_what_it_should(self):
        errors = []
        validate({'apiVersion': 'apps/v1', 'kind': 'Deployment', 'metadata': {'name': 'x'},
                  'spec': {'replicas': '2', 'template': {'spec': {'containers': [{'image': 'i', 'portz': []}]}}}},
                 'V1Deployment', 'x', errors)
        text = '\n'.join(errors)
        self.assertIn('x.spec.replicas: expected int', text)
        self.assertIn('unknown field "portz"', text)
        self.assertIn('required field "name" of V1Container missing', text)
        self.assertIn('required field "selector" of V1DeploymentSpec missing', text)

    def test_every_object_matches_its_api_schema(self):
        self.assertGreaterEqual(len(self.docs), 10)
        for f, d in self.docs:
            key = (d.get('apiVersion'), d.get('kind'))
            self.assertIn(key, KINDS, f'{f}: unexpected apiVersion/kind {key}')
            errors = []
            validate(d, KINDS[key], f'{f}:{d["kind"]}/{d["metadata"].get("name")}', errors)
            self.assertEqual(errors, [], '\n'.join(errors))

    def test_kustomization_lists_every_manifest(self):
        with open(os.path.join(K8S, 'kustomization.yaml')) as f:
            kust = yaml.safe_load(f)
        self.assertEqual(kust['kind'], 'Kustomization')
        files = {os.path.basename(p) for p in glob.glob(os.path.join(K8S, '*.yaml'))}
        files -= {'kustomization.yaml'}
        files = {x for x in files if not x.endswith('.example.yaml')}
        self.assertEqual(set(kust['resources']), files)

    def pod_spec(self, kind, name):
        return self.by_kind[kind][name]['spec']['template']['spec']

    def test_workload_selectors_services_ports_and_volumes_line_up(self):
        workloads = [d for _, d in self.docs if d['kind'] in ('Deployment', 'StatefulSet', 'Job')]
        for w in workloads:
            spec = w['spec']
            labels = spec['template']['metadata']['labels']
            if w['kind'] != 'Job':
                for k, v in spec['selector']['matchLabels'].items():
                    self.assertEqual(labels.get(k), v, f'{w["metadata"]["name"]}: selector does not match its pods')
            pod = spec['template']['spec']
            volumes = {v['name'] for v in pod.get('volumes', [])}
            volumes |= {t['metadata']['name'] for t in spec.get('volumeClaimTemplates', [])}
            for c in pod['containers']:
                for m in c.get('volumeMounts', []):
                    self.assertIn(m['name'], volumes, f'{c["name"]}: mounts undeclared volume {m["name"]}')
                ports = {p['name'] for p in c.get('ports', [])}
                for probe in ('readinessProbe', 'livenessProbe'):
                    p = c.get(probe, {})
                    if 'httpGet' in p:
                        self.assertIn(p['httpGet']['port'], ports)
                    if 'exec' in p:
                        self.assertEqual(p['exec']['command'][0], 'colibri-health')
                self.assertEqual(w['spec']['template']['spec']['securityContext']['runAsUser'], 10001)
            for v in pod.get('volumes', []):
                if 'persistentVolumeClaim' in v:
                    self.assertIn(v['persistentVolumeClaim']['claimName'], self.by_kind['PersistentVolumeClaim'])
        # Every Service selects the pods of one workload and targets named ports they have.
        for name, svc in self.by_kind['Service'].items():
            targets = [w for w in workloads if w['kind'] != 'Job' and all(
                w['spec']['template']['metadata']['labels'].get(k) == v for k, v in svc['spec']['selector'].items())]
            self.assertEqual(len(targets), 1, f'service {name} selects {len(targets)} workloads')
            ports = {p['name'] for c in targets[0]['spec']['template']['spec']['containers'] for p in c.get('ports', [])}
            for p in svc['spec']['ports']:
                self.assertIn(p['targetPort'], ports, f'service {name} port {p["name"]}')

    def test_cluster_topology(self):
        # Stores: a StatefulSet on local NVMe claims, behind a headless Service of the same name.
        sts = self.by_kind['StatefulSet']['expert-store']
        self.assertEqual(sts['spec']['serviceName'], 'expert-store')
        self.assertEqual(self.by_kind['Service']['expert-store']['spec']['clusterIP'], 'None')
        claims = sts['spec']['volumeClaimTemplates']
        self.assertEqual([c['metadata']['name'] for c in claims], ['disk0', 'disk1'])
        sc = self.by_kind['StorageClass']
        for c in claims:
            self.assertIn(c['spec']['storageClassName'], sc)
            self.assertEqual(sc[c['spec']['storageClassName']]['provisioner'], 'kubernetes.io/no-provisioner')
        env = {e['name']: e['value'] for e in self.pod_spec('StatefulSet', 'expert-store')['containers'][0]['env']}
        mounts = {m['mountPath'] for m in self.pod_spec('StatefulSet', 'expert-store')['containers'][0]['volumeMounts']}
        self.assertEqual(set(env['COLIBRI_DISKS'].split()), {'/data/disk0', '/data/disk1'})
        self.assertTrue({'/data/disk0', '/data/disk1'} <= mounts)
        # Compute: one GPU, stores found through the headless Service's DNS name.
        compute = self.pod_spec('Deployment', 'compute')['containers'][0]
        self.assertEqual(int(compute['resources']['limits']['nvidia.com/gpu']), 1)
        self.assertIn('--store-dns=expert-store:50051', compute['args'])
        # Router: behind a Service, pointing at the compute Service.
        router = self.pod_spec('Deployment', 'router')['containers'][0]
        self.assertIn('--compute=compute:50052', router['args'])
        self.assertIn(self.by_kind['Service']['router']['spec']['type'], ('LoadBalancer', 'NodePort', 'ClusterIP'))
        # Everything namespaced lives in one namespace that is declared.
        for f, d in self.docs:
            if d['kind'] not in ('Namespace', 'StorageClass', 'PersistentVolume'):
                self.assertEqual(d['metadata'].get('namespace'), 'colibri', f'{f}: {d["kind"]}')
        self.assertIn('colibri', self.by_kind['Namespace'])


if __name__ == '__main__':
    unittest.main()
