"""Tests of hack/oci-image (run by `make test`: python3 -m unittest discover -s hack -p 'test_*.py')."""

import gzip
import hashlib
import importlib.machinery
import importlib.util
import io
import json
import os
import tarfile
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
_loader = importlib.machinery.SourceFileLoader("oci_image", os.path.join(HERE, "oci-image"))
_spec = importlib.util.spec_from_loader("oci_image", _loader)
oci = importlib.util.module_from_spec(_spec)
_loader.exec_module(oci)

DOCKERFILE = os.path.join(os.path.dirname(HERE), "Dockerfile")


class Files:
    """A fake binary and CA bundle in a temporary directory."""

    def __init__(self):
        self.dir = tempfile.TemporaryDirectory()
        self.binary = os.path.join(self.dir.name, "wave")
        self.ca = os.path.join(self.dir.name, "ca.crt")
        with open(self.binary, "wb") as f:
            f.write(b"\x7fELF not really wave")
        with open(self.ca, "wb") as f:
            f.write(b"-----BEGIN CERTIFICATE-----\n")

    def image(self, dockerfile_text, commit="abc123"):
        entries, config, labels = oci.wave_image(dockerfile_text, self.binary, commit, ca_bundle=self.ca)
        path = os.path.join(self.dir.name, "image.tar")
        with open(path, "wb") as f:
            f.write(oci.image_archive(entries, config, "wave:testenv", labels))
        return path


def dockerfile():
    with open(DOCKERFILE) as f:
        return f.read()


def read(path):
    with open(path, "rb") as f:
        return f.read()


class WaveImage(unittest.TestCase):
    def setUp(self):
        self.files = Files()
        self.addCleanup(self.files.dir.cleanup)

    def test_the_image_is_the_dockerfiles_final_stage_with_the_static_binary_as_wave(self):
        image = oci.inspect(self.files.image(dockerfile(), commit="abc123"))
        config = image["config"]
        self.assertEqual(image["name"], "docker.io/library/wave:testenv")
        self.assertEqual(config["User"], "65532:65532")
        self.assertEqual(config["Entrypoint"], ["/wave"])
        self.assertEqual(config["Cmd"], ["run"])
        self.assertEqual(sorted(config["ExposedPorts"]), ["8080/tcp", "8081/tcp"])
        self.assertEqual(config["Labels"]["org.opencontainers.image.revision"], "abc123")
        self.assertEqual(config["Labels"]["org.opencontainers.image.title"], "wave")
        files = {p: f for p, f in image["files"].items() if f["kind"] != "dir"}
        self.assertEqual(sorted(files), ["/etc/ssl/certs/ca-certificates.crt", "/wave"])
        wave = read(self.files.binary)
        self.assertEqual(files["/wave"]["sha256"], hashlib.sha256(wave).hexdigest())
        self.assertEqual(files["/wave"]["mode"], "0o755")
        self.assertTrue(all(f["uid"] == 0 and f["mtime"] == 0 for f in image["files"].values()))

    def test_every_label_of_the_dockerfile_is_on_the_image(self):
        text = dockerfile()
        stage = oci.final_stage(text)
        declared = {}
        for _, word, rest in stage:
            if word == "LABEL":
                declared.update(oci.key_values(rest))
        image = oci.inspect(self.files.image(text))
        self.assertEqual(sorted(image["config"]["Labels"]), sorted(declared))
        self.assertGreaterEqual(len(declared), 5)

    def test_the_same_inputs_give_the_same_bytes(self):
        first = read(self.files.image(dockerfile()))
        second = read(self.files.image(dockerfile()))
        self.assertEqual(first, second)

    def test_every_blob_is_named_by_its_digest_and_the_diff_id_is_the_uncompressed_layer(self):
        with tarfile.open(self.files.image(dockerfile())) as tar:
            names = [m.name for m in tar.getmembers() if m.isfile() and m.name.startswith("blobs/")]
            self.assertEqual(len(names), 3)
            for name in names:
                data = tar.extractfile(name).read()
                self.assertEqual(name.rsplit("/", 1)[1], hashlib.sha256(data).hexdigest())
            index = json.load(tar.extractfile("index.json"))
            manifest = json.loads(tar.extractfile("blobs/sha256/" + index["manifests"][0]["digest"][7:]).read())
            config = json.loads(tar.extractfile("blobs/sha256/" + manifest["config"]["digest"][7:]).read())
            layer = tar.extractfile("blobs/sha256/" + manifest["layers"][0]["digest"][7:]).read()
            self.assertEqual(config["rootfs"]["diff_ids"], ["sha256:" + hashlib.sha256(gzip.decompress(layer)).hexdigest()])
            self.assertEqual(json.load(tar.extractfile("oci-layout")), {"imageLayoutVersion": "1.0.0"})

    def test_an_instruction_the_builder_cannot_reproduce_is_an_error_that_names_its_line(self):
        for extra, what in [
            ('ENV A=b', "ENV"),
            ("RUN true", "RUN"),
            ("WORKDIR /x", "WORKDIR"),
            ("COPY config.yaml /config.yaml", "only `COPY --from=build"),
            ("COPY --from=build /usr/bin/curl /curl", "no source on this machine"),
        ]:
            text = dockerfile().rstrip() + "\n" + extra + "\n"
            line = len(text.splitlines())
            with self.assertRaises(oci.ImageError) as e:
                oci.wave_image(text, self.files.binary, "c", ca_bundle=self.files.ca)
            self.assertIn(what, str(e.exception))
            self.assertIn(f"line {line}", str(e.exception))

    def test_a_final_stage_on_a_base_image_is_refused(self):
        with self.assertRaisesRegex(oci.ImageError, "must be FROM scratch"):
            oci.wave_image("FROM debian:12\nUSER 1\n", self.files.binary, "c", ca_bundle=self.files.ca)

    def test_a_missing_binary_is_a_clear_error(self):
        with self.assertRaisesRegex(oci.ImageError, "cannot read /nonexistent/wave"):
            oci.wave_image(dockerfile(), "/nonexistent/wave", "c", ca_bundle=self.files.ca)

    def test_a_trailing_backslash_at_the_end_is_an_error(self):
        with self.assertRaisesRegex(oci.ImageError, "never ends"):
            oci.dockerfile_instructions("FROM scratch\nLABEL a=b \\\n")

    def test_a_label_that_names_another_version_than_the_crate_is_refused(self):
        with self.assertRaisesRegex(oci.ImageError, "the crate is 9.9.9"):
            oci.wave_image(dockerfile(), self.files.binary, "c", ca_bundle=self.files.ca, version="9.9.9")


class AppImage(unittest.TestCase):
    def test_an_app_image_runs_its_one_program_as_an_unprivileged_user(self):
        files = Files()
        self.addCleanup(files.dir.cleanup)
        out = os.path.join(files.dir.name, "app.tar")
        with open(out, "wb") as f:
            f.write(oci.image_archive(*oci.app_image(files.binary)[:2], "reload-demo:testenv", {}))
        image = oci.inspect(out)
        name = os.path.basename(files.binary)
        self.assertEqual(image["config"]["Entrypoint"], ["/" + name])
        self.assertEqual(image["config"]["User"], "65532:65532")
        self.assertEqual(list(image["files"]), ["/" + name])
        self.assertEqual(image["files"]["/" + name]["mode"], oct(0o755))
        self.assertEqual(image["name"], "docker.io/library/reload-demo:testenv")

    def test_a_missing_program_is_a_clear_error(self):
        with self.assertRaisesRegex(oci.ImageError, "cannot read /nonexistent/app"):
            oci.app_image("/nonexistent/app")


class Names(unittest.TestCase):
    def test_names_are_normalised_as_containerd_and_the_kubelet_do(self):
        self.assertEqual(oci.normalise("busybox:testenv"), "docker.io/library/busybox:testenv")
        self.assertEqual(oci.normalise("busybox"), "docker.io/library/busybox:latest")
        self.assertEqual(oci.normalise("registry.k8s.io/pause:testenv"), "registry.k8s.io/pause:testenv")
        self.assertEqual(oci.normalise("ghcr.io/wave-rs/wave:0.1.0"), "ghcr.io/wave-rs/wave:0.1.0")
        self.assertEqual(oci.normalise("localhost:5000/wave"), "localhost:5000/wave:latest")
        self.assertEqual(oci.normalise("acme/wave:1"), "docker.io/acme/wave:1")


class Layer(unittest.TestCase):
    def test_parents_come_first_and_a_path_given_twice_is_an_error(self):
        raw = oci.layer_tar([oci.Entry("a/b/c", "file", b"x"), oci.Entry("a/d", "link", target="b/c")])
        names = [m.name for m in tarfile.open(fileobj=io.BytesIO(raw)).getmembers()]
        self.assertEqual(names, ["a", "a/b", "a/b/c", "a/d"])
        with self.assertRaisesRegex(oci.ImageError, "given twice"):
            oci.layer_tar([oci.Entry("a", "file", b"x"), oci.Entry("a", "file", b"y")])


if __name__ == "__main__":
    unittest.main()
