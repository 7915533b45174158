"""The segmentation model: the built-in net, or a lab's own torch.export program (or TorchScript file), and metadata.

Model contract (built-in and `--model PATH` alike): the worker turns each RGB tile (T x T pixels at `input_mpp_um`,
T = `tile_size`) into a float32 batch N x 3 x T x T, x = (rgb / 255 - mean) / std with the model's `normalisation`
(`loaded_model.LoadedModel.prepare`), and the model returns class logits N x C x T/s x T/s (s = `output_stride`,
C = len(classes), class 0 = background).

A model file is a **torch.export program** (`.pt2`, written by `torch.export.save`; see `export.package_model`
and `python -m worker package-model`) carrying its metadata inside the archive as ``gpuburst.json``
(``torch.export.save(ep, path, extra_files={"gpuburst.json": json.dumps(meta)})``). The keys
(`metadata.validate_metadata`):

``classes``        required: list of class names, index 0 = background (2-256 names)
``input_mpp_um``   required for .pt2: µm per pixel the model analyses at (0.05-20)
``tile_size``      input side in pixels (default 256)
``output_stride``  input pixels per output pixel (default 4; must divide tile_size)
``normalisation``  {"mean": [3 floats], "std": [3 floats]} applied to RGB in [0, 1] (default mean 0, std 1)
``colors``         optional [r, g, b] (0-255) per class for overlays and previews
``name``, ``version``  reported in every result (default the file stem, "unknown")
``architecture``, ``arch``  optional: "gpuburst.TinySegNet" and its keyword arguments, so the loader can run the
                   program's own weights in the eager net (and the CPU fast path) after checking it computes the same
                   logits; any other key is kept in `LoadedModel.info`.

The program must take one N x 3 x T x T tensor with a dynamic batch dimension (`torch.export.Dim`). The format is
told from the file's content, not its suffix. TorchScript files (``torch.jit.save`` with the same ``gpuburst.json``
in ``_extra_files``, or a scripted module with a ``classes: List[str]`` attribute) are still accepted, though
deprecated in torch 2.13; there ``input_mpp_um`` may be left out (run at the slide's own resolution).

Where the file comes from is `model_store`'s job: a local path or ``s3://bucket/key``, pinned by its SHA-256
(`--model-sha256`), through a node-local cache keyed by digest; `loading.load_model` reads the open file whose bytes
were hashed. `pt2_archive` reads a .pt2 without importing torch.export, for the built-in architecture's fast load.

A model file is code: load only files you trust. Every failure to load one is a `ModelError`, one line naming the
file and what is wrong.
"""
