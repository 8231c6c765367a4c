"""The Docker files agree with pyproject.toml, prefect.yaml and each other.

Nothing under docker/ is built or started here (no Docker engine on these machines); these checks
only catch drift: a pin, a package, a pool, a version or a service name changed in one place and
not in the others. Files are parsed as text/YAML; no network, no Docker.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
COMPOSE = DOCKER / "compose.yaml"
DOCKERFILES = {"cpu": DOCKER / "Dockerfile.cpu", "gpu": DOCKER / "Dockerfile.gpu"}
SERVER = "prefect-server"


@cache
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


@cache
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


@cache
def prefect_yaml() -> dict:
    return yaml.safe_load((ROOT / "prefect.yaml").read_text())


def services() -> dict[str, dict]:
    return compose()["services"]


def requirement(name: str) -> Requirement:
    for line in pyproject()["project"]["dependencies"]:
        req = Requirement(line)
        if req.name == name:
            return req
    raise AssertionError(f"{name} is not a dependency in pyproject.toml")


def extra_requirements(extra: str) -> list[Requirement]:
    return [Requirement(line) for line in pyproject()["project"]["optional-dependencies"][extra]]


def exact_pin(name: str, extra: str) -> str:
    """The ``==`` version of ``name`` in one extra of pyproject.toml."""
    (req,) = [r for r in extra_requirements(extra) if r.name == name]
    (spec,) = req.specifier
    assert spec.operator == "==", f"pyproject pins {name} with {spec}, expected =="
    return spec.version


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    logical, current = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        current += line[:-1] + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            logical.append(current)
            current = ""
    out = []
    for line in logical:
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def args(path: Path) -> dict[str, str]:
    found = {}
    for word, rest in instructions(path):
        if word == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            found[name.strip()] = value.strip()
    return found


def envs(path: Path) -> dict[str, str]:
    found = {}
    for word, rest in instructions(path):
        if word == "ENV":
            for token in shlex.split(rest):
                name, _, value = token.partition("=")
                found[name] = value
    return found


def cmd(path: Path) -> list[str]:
    cmds = [rest for word, rest in instructions(path) if word == "CMD"]
    assert cmds, f"{path.name} has no CMD"
    return json.loads(cmds[-1])


def copied_sources(path: Path) -> set[str]:
    sources = set()
    for word, rest in instructions(path):
        if word == "COPY":
            tokens = [t for t in shlex.split(rest) if not t.startswith("--")]
            sources.update(t.rstrip("/") for t in tokens[:-1])
    return sources


def run_lines(path: Path) -> str:
    return "\n".join(rest for word, rest in instructions(path) if word == "RUN")


def environment(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.partition("=")[::2] for item in env)
    return {k: str(v) for k, v in env.items()}


def compose_default(value: str) -> str:
    """`${NAME:-default}` -> default; a plain value is returned as it is."""
    match = re.fullmatch(r"\$\{\w+:-([^}]*)\}", value)
    return match.group(1) if match else value


def command_text(service: dict) -> str:
    command = service.get("command") or ""
    return " ".join(command) if isinstance(command, list) else command


def service_dockerfile(service: dict) -> Path | None:
    build = service.get("build")
    if build is None:
        return None
    if isinstance(build, str):
        build = {"context": build}
    context = (COMPOSE.parent / build.get("context", ".")).resolve()
    return context / build.get("dockerfile", "Dockerfile")


def worker_pools() -> dict[str, str]:
    """service -> the pool its `prefect worker start` polls (its command, else its image's CMD)."""
    pools = {}
    for name, service in services().items():
        text = command_text(service)
        if not text and (dockerfile := service_dockerfile(service)) is not None:
            text = " ".join(cmd(dockerfile))
        if "worker start" in text:
            match = re.search(r"--pool\s+(\S+)", text)
            assert match, f"{name}: `prefect worker start` without --pool"
            assert re.search(r"--type\s+process\b", text), f"{name}: worker is not a process worker"
            pools[name] = match.group(1)
    return pools


def prefect_pools() -> set[str]:
    return {d["work_pool"]["name"] for d in prefect_yaml()["deployments"]}


# --- compose structure -----------------------------------------------------------------------


def test_every_build_dockerfile_exists_and_every_dockerfile_is_built():
    built = set()
    for name, service in services().items():
        dockerfile = service_dockerfile(service)
        if dockerfile is not None:
            assert dockerfile.is_file(), f"{name}: {dockerfile} does not exist"
            assert dockerfile.resolve().is_relative_to(ROOT), f"{name}: build context outside the repo"
            built.add(dockerfile.resolve())
    assert built == {p.resolve() for p in DOCKERFILES.values()}


def test_expected_services_and_named_volumes():
    assert {"postgres", SERVER, "minio", "worker-cpu", "worker-gpu", "deploy"} <= set(services())
    declared = set(compose().get("volumes") or {})
    for name, service in services().items():
        for mount in service.get("volumes", []):
            source = mount.split(":")[0]
            if not source.startswith((".", "/", "~")):
                assert source in declared, f"{name}: named volume {source} is not declared"
    assert any(m.endswith(":/var/lib/postgresql/data") for m in services()["postgres"]["volumes"])
    assert any(m.endswith(":/data") for m in services()["minio"]["volumes"])
    assert "healthcheck" in services()["postgres"]


def test_published_ports_are_local_only():
    for name, service in services().items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond localhost"
    assert "ports" not in services()["postgres"]


def test_gpu_worker_reserves_a_gpu_and_only_in_the_gpu_profile():
    for name, service in services().items():
        devices = (((service.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices")
        if name == "worker-gpu":
            assert service.get("profiles") == ["gpu"]
            assert devices and devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
            assert service_dockerfile(service).resolve() == DOCKERFILES["gpu"].resolve()
        else:
            assert not devices, f"{name} reserves a device: a plain `up` would need a GPU"


# --- pools -------------------------------------------------------------------------------------


def test_dockerfile_workers_poll_their_pools():
    assert cmd(DOCKERFILES["cpu"]) == ["prefect", "worker", "start", "--pool", "synrail-cpu", "--type", "process"]
    assert cmd(DOCKERFILES["gpu"]) == ["prefect", "worker", "start", "--pool", "synrail-gpu", "--type", "process"]


def test_compose_workers_cover_every_pool_of_prefect_yaml():
    pools = worker_pools()
    assert pools.get("worker-cpu") == "synrail-cpu" and pools.get("worker-gpu") == "synrail-gpu"
    missing = prefect_pools() - set(pools.values())
    assert not missing, f"prefect.yaml deploys to pools no compose worker polls: {missing}"


def test_deploy_service_creates_the_pools_and_deploys_all():
    text = command_text(services()["deploy"])
    created = set(re.findall(r"work-pool create\s+(\S+)\s+--type\s+process", text))
    assert prefect_pools() <= created, f"deploy does not create {prefect_pools() - created}"
    assert set(worker_pools().values()) <= created
    assert "prefect --no-prompt deploy --all" in text
    assert service_dockerfile(services()["deploy"]).resolve() == DOCKERFILES["cpu"].resolve()


# --- Dockerfiles vs pyproject ------------------------------------------------------------------


def test_torch_is_an_extra_with_one_pin_everywhere():
    core = {Requirement(line).name for line in pyproject()["project"]["dependencies"]}
    assert not core & {"torch", "torchvision", "ultralytics", "diffusers", "segment-anything", "transformers"}
    for extra in ("torch", "sam", "diffusion", "train"):
        assert (exact_pin("torch", extra), exact_pin("torchvision", extra)) == (exact_pin("torch", "sam"),
                                                                              exact_pin("torchvision", "sam"))


def test_gpu_image_pins_torch_as_the_extras_and_installs_them():
    path = DOCKERFILES["gpu"]
    found = args(path)
    assert found.get("TORCH_VERSION") == exact_pin("torch", "sam")
    assert found.get("TORCHVISION_VERSION") == exact_pin("torchvision", "sam")
    run = run_lines(path)
    assert '"torch==${TORCH_VERSION}"' in run and '"torchvision==${TORCHVISION_VERSION}"' in run
    hardcoded = re.findall(r"torch(?:vision)?==\d", run)
    assert not hardcoded, f"{path.name} pins torch outside the ARGs: {hardcoded}"
    assert 'pip install ".[all]"' in run  # train-evaluate needs Ultralytics; SAM/diffusion galleries their stacks
    assert "whl/cpu" not in run
    assert args(path)["CUDA_IMAGE"].startswith("nvidia/cuda:")
    assert ("FROM", "${CUDA_IMAGE}") in instructions(path)


def test_cpu_image_is_the_core_install_without_torch():
    path = DOCKERFILES["cpu"]
    run = run_lines(path)
    assert re.search(r'pip install \.\s', run) and "[" not in run.split("pip install", 1)[1].split("&&")[0]
    assert "torch" not in "".join(args(path)) and "download.pytorch.org" not in run
    assert "find_spec('torch') is None" in run  # the image build itself checks torch is absent


def top_level_packages() -> set[str]:
    patterns = pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]
    names = {p.split(".")[0].rstrip("*") for p in patterns}
    # Also any package on disk that the patterns match (a new synrail_x/ would be installed too).
    for child in ROOT.iterdir():
        if (child / "__init__.py").is_file() and any(fnmatch.fnmatch(child.name, p) for p in patterns):
            names.add(child.name)
    return names


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_dockerfiles_copy_every_package_and_the_deployment_files(kind):
    sources = copied_sources(DOCKERFILES[kind])
    needed = top_level_packages() | {"configs", "prefect.yaml", "pyproject.toml", pyproject()["project"]["readme"]}
    assert needed <= sources, f"{DOCKERFILES[kind].name} does not copy {needed - sources}"
    for source in sources:
        assert (ROOT / source).exists(), f"{DOCKERFILES[kind].name} copies {source}, which does not exist"
    assert re.search(r'pip install (\.\s|"\.\[)', run_lines(DOCKERFILES[kind])), "the package is not installed from ."


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_image_python_satisfies_requires_python(kind):
    path = DOCKERFILES[kind]
    version = args(path)["PYTHON_VERSION"]
    assert Version(version) in SpecifierSet(pyproject()["project"]["requires-python"])
    text = "\n".join(f"{word} {rest}" for word, rest in instructions(path))
    uses = "FROM python:${PYTHON_VERSION}" if kind == "cpu" else "python${PYTHON_VERSION} -m venv"
    assert uses in text, f"{path.name} does not build on PYTHON_VERSION"
    hardcoded = re.findall(r"\bpython:?3\.\d+", text)
    assert not hardcoded, f"{path.name} names a Python version besides PYTHON_VERSION: {hardcoded}"


@pytest.mark.parametrize("kind", sorted(DOCKERFILES))
def test_images_run_offline_as_non_root_from_synrail_home(kind):
    path = DOCKERFILES[kind]
    env = envs(path)
    assert env.get("PREFECT_SERVER_ANALYTICS_ENABLED") == "false" and env.get("DO_NOT_TRACK") == "1"
    home = env.get("SYNRAIL_HOME")
    assert home and home == envs(DOCKERFILES["cpu"])["SYNRAIL_HOME"], "both images must share SYNRAIL_HOME"
    workdirs = [rest for word, rest in instructions(path) if word == "WORKDIR"]
    assert workdirs and workdirs[-1] in (home, "${SYNRAIL_HOME}")
    users = [rest for word, rest in instructions(path) if word == "USER"]
    assert users and users[-1] not in ("root", "0")


# --- Prefect and S3 wiring ---------------------------------------------------------------------


def test_prefect_versions_agree():
    version = prefect_yaml()["prefect-version"]
    assert Version(version) in requirement("prefect").specifier
    for path in DOCKERFILES.values():
        assert args(path)["PREFECT_VERSION"] == version, path.name
        assert '"prefect==${PREFECT_VERSION}"' in run_lines(path)
    image = services()[SERVER]["image"]
    assert image.startswith(f"prefecthq/prefect:{version}-python"), image


def test_server_runs_on_postgres_without_analytics():
    server = services()[SERVER]
    assert "server start" in command_text(server) and "--host 0.0.0.0" in command_text(server)
    env = environment(server)
    assert env["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
    url = urlsplit(env["PREFECT_API_DATABASE_CONNECTION_URL"].replace("${POSTGRES_PASSWORD:-prefect}", "pw"))
    assert url.scheme == "postgresql+asyncpg" and url.hostname == "postgres" and url.port == 5432
    pg = environment(services()["postgres"])
    assert url.username == pg["POSTGRES_USER"] and url.path == f"/{pg['POSTGRES_DB']}"
    assert server["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "healthcheck" in server
    assert any(str(p).endswith(":4200") for p in server["ports"])


def test_prefect_clients_point_at_the_server_service():
    clients = [name for name, s in services().items() if service_dockerfile(s) is not None]
    assert set(worker_pools()) | {"deploy"} <= set(clients)
    server_port = {str(p).rsplit(":", 1)[-1] for p in services()[SERVER]["ports"]}
    for name in clients:
        env = environment(services()[name])
        url = urlsplit(env["PREFECT_API_URL"])
        assert url.hostname == SERVER and str(url.port) in server_port and url.path == "/api", name
        assert env.get("PREFECT_SERVER_ANALYTICS_ENABLED") == "false" and env.get("DO_NOT_TRACK") == "1"
        assert services()[name]["depends_on"][SERVER]["condition"] == "service_healthy", name


def test_s3_clients_point_at_minio_with_its_credentials():
    minio = environment(services()["minio"])
    for name, service in services().items():
        if service_dockerfile(service) is None:
            continue
        env = environment(service)
        url = urlsplit(env["AWS_ENDPOINT_URL"])
        assert url.hostname == "minio" and url.port == 9000, name
        assert env["AWS_ACCESS_KEY_ID"] == minio["MINIO_ROOT_USER"], name
        assert env["AWS_SECRET_ACCESS_KEY"] == minio["MINIO_ROOT_PASSWORD"], name
        for var in ("SYNRAIL_DATASET", "SYNRAIL_VIDEOS"):
            assert urlsplit(compose_default(env[var])).netloc == "synrail", f"{name}: {var} outside the bucket"
    assert "mc mb --ignore-existing local/synrail" in command_text(services()["minio-init"])


def test_deploy_has_every_variable_prefect_yaml_templates():
    used = set(re.findall(r"\{\{\s*\$(\w+)\s*\}\}", json.dumps(prefect_yaml())))   # values, not comments
    available = set(environment(services()["deploy"])) | set(envs(DOCKERFILES["cpu"]))
    assert used <= available, f"prefect.yaml needs {used - available}, which deploy does not set"
    config = compose_default(environment(services()["deploy"])["SYNRAIL_CONFIG"])
    assert (ROOT / config).is_file(), f"default SYNRAIL_CONFIG {config} does not exist"
