# Re-writes a GGUF file as a split model with gguf-py's GGUFWriter (split_max_tensors),
# the writer llama.cpp's converters use: <out stem>-0000i-of-0000N.gguf.
# Usage: gguf_py_split.py IN OUT MAX_TENSORS_PER_SHARD (PYTHONPATH=<llama.cpp>/gguf-py).
import sys
from pathlib import Path
from gguf import GGUFReader, GGUFWriter, GGUFValueType

src, out, max_tensors = sys.argv[1], sys.argv[2], int(sys.argv[3])
r = GGUFReader(src)
arch = r.fields["general.architecture"].contents()
w = GGUFWriter(Path(out), arch, split_max_tensors=max_tensors)
for key, field in r.fields.items():
    if key.startswith("GGUF.") or key == "general.architecture":
        continue
    vtype = field.types[0]
    sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
    w.add_key_value(key, field.contents(), vtype, sub_type=sub)
for t in r.tensors:
    w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
