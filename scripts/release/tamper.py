"""What an attacker with write access to the registry does: change one
layer of a signed image (the licence file in the amd64 image's layer), push
the image under the released tag, and copy the signature and attestations
to the new digest. `cosign verify` must then fail (scripts/release/prove.sh).

    python3 tamper.py REGISTRY REPOSITORY TAG SIGNED_INDEX_DIGEST   # prints the new index digest
"""
import gzip
import hashlib
import io
import json
import sys
import tarfile
import urllib.request

registry, repo, tag, signed = sys.argv[1:]
base = f"http://{registry}/v2/{repo}"
INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def get(path, accept=None):
    req = urllib.request.Request(f"{base}/{path}", headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req) as r:
        return r.read()


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def put_blob(data):
    req = urllib.request.Request(f"{base}/blobs/uploads/", method="POST")
    with urllib.request.urlopen(req) as r:
        location = r.headers["Location"]
    if location.startswith("/"):
        location = f"http://{registry}{location}"
    sep = "&" if "?" in location else "?"
    req = urllib.request.Request(f"{location}{sep}digest={digest(data)}", data=data, method="PUT",
                                 headers={"Content-Type": "application/octet-stream"})
    urllib.request.urlopen(req).close()
    return digest(data)


def put_manifest(ref, data, media_type):
    req = urllib.request.Request(f"{base}/manifests/{ref}", data=data, method="PUT",
                                 headers={"Content-Type": media_type})
    urllib.request.urlopen(req).close()
    return digest(data)


index = json.loads(get(f"manifests/{signed}", INDEX))
entry = next(m for m in index["manifests"] if m.get("platform", {}).get("architecture") == "amd64")
manifest = json.loads(get(f"manifests/{entry['digest']}", MANIFEST))
config = json.loads(get(f"blobs/{manifest['config']['digest']}"))
layer = manifest["layers"][-1]

# The layer, one file changed.
old = tarfile.open(fileobj=io.BytesIO(gzip.decompress(get(f"blobs/{layer['digest']}"))))
raw = io.BytesIO()
with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as new:
    changed = False
    for member in old.getmembers():
        data = old.extractfile(member).read() if member.isfile() else None
        if member.isfile() and member.name.endswith("usr/share/doc/finalizer-guard/LICENSE"):
            data += b"\nchanged after signing\n"
            member.size = len(data)
            changed = True
        new.addfile(member, io.BytesIO(data) if data is not None else None)
    assert changed, "no licence file in the layer"
layer_tar = raw.getvalue()
layer_gz = gzip.compress(layer_tar, mtime=0)
config["rootfs"]["diff_ids"][-1] = digest(layer_tar)
config_bytes = json.dumps(config).encode()
manifest["layers"][-1] = dict(layer, digest=put_blob(layer_gz), size=len(layer_gz))
manifest["config"] = dict(manifest["config"], digest=put_blob(config_bytes), size=len(config_bytes))
manifest_bytes = json.dumps(manifest).encode()
entry.update(digest=put_manifest(digest(manifest_bytes), manifest_bytes, MANIFEST), size=len(manifest_bytes))
index_bytes = json.dumps(index).encode()
tampered = put_manifest(tag, index_bytes, INDEX)

# The signed index's signature and attestations, copied to the tampered digest's tags.
for suffix in ("sig", "att"):
    old_tag = signed.replace(":", "-") + "." + suffix
    data = get(f"manifests/{old_tag}", f"{MANIFEST}, application/vnd.docker.distribution.manifest.v2+json")
    media_type = json.loads(data).get("mediaType", MANIFEST)
    put_manifest(tampered.replace(":", "-") + "." + suffix, data, media_type)
print(tampered)
