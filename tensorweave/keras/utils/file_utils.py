"""``keras.utils.get_file``: a file from a URL into Keras' cache (``~/.keras/datasets``, or
``$KERAS_HOME``), checked against an md5/sha256 hash and optionally extracted.

This machine has no network, so origins are ``file://`` URLs and local paths (copied into the
cache); an ``http(s)`` origin raises an error saying so. Archives (tar, tar.gz/bz2/xz, zip) are
extracted member by member after checking each one: no absolute paths, no ``..``, no links or
devices, nothing that would land outside the extraction directory.

>>> import os, tempfile
>>> src = os.path.join(tempfile.mkdtemp(), "data.txt")
>>> with open(src, "w") as f:
...     _ = f.write("hello")
>>> path = get_file(origin="file://" + src, cache_dir=tempfile.mkdtemp(),
...                 file_hash="2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")
>>> os.path.basename(path), open(path).read()
('data.txt', 'hello')
"""
import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile


def _keras_home():
    return os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")


def _resolve_hasher(algorithm, file_hash):
    if algorithm == "sha256" or (algorithm == "auto" and len(file_hash) == 64):
        return "sha256"
    if algorithm in ("md5", "auto"):
        return "md5"
    raise ValueError(f"get_file: unknown hash_algorithm {algorithm!r}; expected 'auto', 'sha256' or 'md5'")


def hash_file(path, algorithm="sha256", chunk_size=1 << 16):
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(chunk_size), b""):
            h.update(chunk)
    return h.hexdigest()


def validate_file(path, file_hash, algorithm="auto"):
    """Whether the file's md5/sha256 equals ``file_hash``."""
    return hash_file(path, _resolve_hasher(algorithm, str(file_hash))) == str(file_hash).lower()


def _local_source(origin):
    """The local path an origin names, or a clear error for network URLs."""
    parts = urllib.parse.urlsplit(origin)
    if parts.scheme == "file":
        return urllib.request.url2pathname(parts.path)
    if parts.scheme in ("", ) or (len(parts.scheme) == 1 and os.name == "nt"):
        return origin
    raise ValueError(f"get_file: cannot fetch {origin!r}: tensorweave's get_file reads file:// URLs and local paths "
                     "only (no network access). Download the file yourself and pass origin='file:///path/to/it'.")


def _copy(src, dst):
    if not os.path.isfile(src):
        raise FileNotFoundError(f"get_file: origin file {src!r} does not exist (or is not a regular file)")
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dst), prefix=".tmp-" + os.path.basename(dst) + "-")
    os.close(fd)
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _inside(root, name):
    target = os.path.realpath(os.path.join(root, name))
    return target == root or target.startswith(root + os.sep)


def _check_member_name(name, root, archive):
    if not name or os.path.isabs(name) or name.startswith(("/", "\\")) or ".." in name.replace("\\", "/").split("/") \
            or not _inside(root, name):
        raise ValueError(f"get_file: archive {archive} has a member {name!r} that would be written outside "
                         f"{root}; refusing to extract it")


def _extract_tar(path, root):
    with tarfile.open(path) as tar:
        members = tar.getmembers()
        for m in members:
            _check_member_name(m.name, root, path)
            if not (m.isfile() or m.isdir()):
                raise ValueError(f"get_file: archive {path} has a member {m.name!r} that is a link or a device; "
                                 "refusing to extract it")
        for m in members:
            target = os.path.join(root, m.name)
            if m.isdir():
                os.makedirs(target, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with tar.extractfile(m) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)


def _extract_zip(path, root):
    with zipfile.ZipFile(path) as z:
        infos = z.infolist()
        for info in infos:
            _check_member_name(info.filename, root, path)
            if (info.external_attr >> 16) & 0o170000 == 0o120000:
                raise ValueError(f"get_file: archive {path} has a member {info.filename!r} that is a symbolic link; "
                                 "refusing to extract it")
        for info in infos:
            target = os.path.join(root, info.filename)
            if info.is_dir():
                os.makedirs(target, exist_ok=True)
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with z.open(info) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)


def extract_archive(path, root, archive_format="auto"):
    """Extracts a tar or zip archive into ``root`` (see the module docstring for the checks);
    returns whether ``path`` was an archive of an allowed format."""
    formats = {"auto": ("tar", "zip"), None: ()}.get(archive_format, archive_format)
    if isinstance(formats, str):
        formats = (formats,)
    root = os.path.realpath(root)
    for fmt in formats:
        is_fmt = tarfile.is_tarfile if fmt == "tar" else zipfile.is_zipfile if fmt == "zip" else None
        if is_fmt is None:
            raise ValueError(f"get_file: unknown archive_format {fmt!r}; expected 'auto', 'tar', 'zip' or None")
        if not is_fmt(path):
            continue
        tmp = tempfile.mkdtemp(dir=os.path.dirname(root), prefix=".tmp-extract-")
        try:
            (_extract_tar if fmt == "tar" else _extract_zip)(path, os.path.realpath(tmp))
            if os.path.isdir(root):
                shutil.rmtree(root)
            os.replace(tmp, root)
        finally:
            if os.path.isdir(tmp):
                shutil.rmtree(tmp)
        return True
    return False


def get_file(fname=None, origin=None, untar=False, md5_hash=None, file_hash=None, cache_subdir="datasets",
             hash_algorithm="auto", extract=False, archive_format="auto", cache_dir=None, force_download=False):
    """Copies ``origin`` into ``cache_dir/cache_subdir`` unless a copy is there (with the right
    hash, when ``file_hash`` is given) and returns its path; with ``extract=True`` (or ``untar``)
    the archive is extracted and the extraction directory returned (Keras 3's names: ``<fname>``
    when the name came from the origin, else ``<fname without suffixes>_extracted``)."""
    if origin is None:
        raise ValueError('Please specify the "origin" argument (URL of the file to download).')
    if md5_hash is not None and file_hash is None:
        file_hash, hash_algorithm = md5_hash, "md5"
    base = os.path.expanduser(os.fspath(cache_dir) if cache_dir is not None else _keras_home())
    os.makedirs(base, exist_ok=True)
    if not os.access(base, os.W_OK):
        base = os.path.join(tempfile.gettempdir(), ".keras")
    datadir = os.path.join(base, cache_subdir)
    os.makedirs(datadir, exist_ok=True)
    provided = fname is not None and os.fspath(fname) != ""
    fname = os.fspath(fname) if provided else os.path.basename(urllib.parse.urlsplit(origin).path)
    if not fname:
        raise ValueError(f"Can't parse the file name from the origin provided: '{origin}'.Please specify the "
                         "`fname` argument.")
    if provided and (os.sep in fname or "/" in fname):
        raise ValueError("Paths are no longer accepted as the `fname` argument. To specify the file's parent "
                         f"directory, use the `cache_dir` argument. Received: fname={fname}")
    if extract or untar:
        if provided and "." in fname:
            target = os.path.join(datadir, fname)
            extraction_dir = os.path.join(datadir, f"{fname[:fname.find('.')]}_extracted")
        else:
            extraction_dir = os.path.join(datadir, fname)
            target = os.path.join(datadir, f"{fname}_archive")
    else:
        target = os.path.join(datadir, fname)

    fetch = force_download or not os.path.exists(target)
    if not fetch and file_hash is not None and not validate_file(target, file_hash, hash_algorithm):
        print(f"A local file was found, but it seems to be incomplete or outdated because the "
              f"{_resolve_hasher(hash_algorithm, str(file_hash))} file hash does not match the original value of "
              f"{file_hash} so we will re-download the data.")
        fetch = True
    if fetch:
        _copy(_local_source(origin), target)
        if file_hash is not None and not validate_file(target, file_hash, hash_algorithm):
            os.remove(target)
            raise ValueError(f"Incomplete or corrupted file detected. The "
                             f"{_resolve_hasher(hash_algorithm, str(file_hash))} file hash does not match the "
                             f"provided value of {file_hash}.")
    if extract or untar:
        if not extract_archive(target, extraction_dir, "tar" if untar else archive_format):
            raise ValueError(f"get_file: {target} is not a {'tar' if untar else archive_format} archive; cannot "
                             "extract it")
        return extraction_dir
    return target
