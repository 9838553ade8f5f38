#!/usr/bin/env python3
"""Builds tiny-v: a tiny random Qwen3.5/3.6-MoE vision-language checkpoint (gen.py's text model with
its bfloat16-safe routing, plus a vision tower, in the pinned checkpoint's MLX layout: the tower
under vision_tower.*, bfloat16, the patch weight channels-last) and records transformers' references
for image prompts:
- per image: the processor's pixel rows (the default processor, and the PIL one when transformers
  has it) and the tower's output rows (float32);
- per prompt: the expanded ids, the three rotary position rows and the rope delta (transformers'
  get_rope_index), the logits at every prompt position (float32; float64 and bfloat16 as in gen.py),
  then greedy decode steps after the prompt (float32, with transformers' cache).

Image rows are routed like one token type: the merger's output has that type's channel set (its
last layer's bias) and the other type channels zero, so every image token carries a type as text
tokens do and the routing stays bfloat16-safe (gen.py's docstring).

Usage: python3 gen_vision.py OUTDIR   (needs torch, torchvision, pillow, transformers >= 5.2; CPU)
"""
import copy
import inspect
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen  # noqa: E402  (sets the environment and refuses optimized kernels first)
from gen import (COMMON_TEXT, MIN_GREEDY_GAP, ROUTE_LOGIT, ROUTE_SAFETY, ROUTE_TYPES, TYPE_VALUE,  # noqa: E402
                 Tensors, bf16_round, float64_casts, same_experts, save_safetensors, shift, text_weights, topk_gap)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from PIL import Image  # noqa: E402
from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeConfig  # noqa: E402
from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeForConditionalGeneration  # noqa: E402

IMAGE, VIDEO, START, END = 1000, 1001, 1002, 1003
NAME = "tiny-v"
SEED = 4242
DECODE_STEPS = 8
TEXT = dict(
    vocab_size=1024, hidden_size=128, num_hidden_layers=4,
    layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
    num_attention_heads=4, num_key_value_heads=2, head_dim=64,
    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=64, linear_value_head_dim=64,
    linear_conv_kernel_dim=4, num_experts=16, num_experts_per_tok=4,
    moe_intermediate_size=64, shared_expert_intermediate_size=64,
    rope_parameters=dict(rope_type="default", rope_theta=10000000.0, partial_rotary_factor=0.25,
                         mrope_section=[3, 3, 2], mrope_interleaved=True),
)
VISION = dict(depth=2, hidden_size=64, num_heads=4, intermediate_size=128, hidden_act="gelu_pytorch_tanh",
              patch_size=16, temporal_patch_size=2, spatial_merge_size=2, in_channels=3, out_hidden_size=128,
              num_position_embeddings=36, deepstack_visual_indexes=[])
PROCESSOR = dict(size={"shortest_edge": 4096, "longest_edge": 65536}, patch_size=16, temporal_patch_size=2,
                 merge_size=2, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5])
# (width, height, mode): one a multiple of 32 (no resize), one resized, one upscaled with alpha.
IMAGES = {"landscape.png": (128, 64, "RGB"), "portrait.png": (70, 100, "RGB"), "small-alpha.png": (45, 33, "RGBA")}
# text runs (lengths) and images, in order
PROMPTS = {
    "landscape": [12, "landscape.png", 10],
    "portrait": [8, "portrait.png", 12],
    "two-images": [6, "landscape.png", 5, "small-alpha.png", 8],
}


def processors():
    """The default Qwen2-VL image processor of this transformers, and the PIL one if it has both."""
    out = {"default": transformers.Qwen2VLImageProcessor(**PROCESSOR)}
    for name in ("Qwen2VLImageProcessorPil", "Qwen2VLImageProcessorFast"):
        cls = getattr(transformers, name, None)
        if cls is not None and cls is not type(out["default"]):
            try:
                out[name] = cls(**PROCESSOR)
            except Exception as e:  # noqa: BLE001
                print("processor", name, "unavailable:", e, flush=True)
    return out


def make_images(rng, d):
    os.makedirs(os.path.join(d, "images"), exist_ok=True)
    for fname, (w, h, mode) in IMAGES.items():
        a = rng.integers(0, 256, size=(h, w, len(mode)), dtype=np.uint8)
        if mode == "RGBA":
            a[:4, :, 3] = 0  # fully transparent rows keep their colour when alpha is dropped
        Image.fromarray(a, mode).save(os.path.join(d, "images", fname))


def vision_weights(ts, channels, image_type):
    """Random tower weights: MLX names under vision_tower. (bfloat16, patch weight channels-last),
    HF names under model.visual."""
    v, rng = VISION, ts.rng
    D, F, M, O = v["hidden_size"], v["intermediate_size"], 4 * v["hidden_size"], v["out_hidden_size"]
    P, T = v["patch_size"], v["temporal_patch_size"]

    def put(name, w):
        ts.hf["model.visual." + name] = torch.from_numpy(ts.put_bf16("vision_tower." + name, w.astype(np.float32)))

    def linear(name, out_f, in_f, gain, bias=0.1):
        put(name + ".weight", ts.lin(out_f, in_f, gain))
        put(name + ".bias", rng.standard_normal(out_f) * bias)

    def norm(name):
        put(name + ".weight", 1.0 + rng.standard_normal(D) * 0.2)
        put(name + ".bias", rng.standard_normal(D) * 0.1)

    pw = (rng.standard_normal((D, 3, T, P, P)) * 2.0 / np.sqrt(3 * T * P * P)).astype(np.float32)
    f, u = bf16_round(np.ascontiguousarray(pw.transpose(0, 2, 3, 4, 1)))
    ts.mlx["vision_tower.patch_embed.proj.weight"] = u
    ts.dtypes["vision_tower.patch_embed.proj.weight"] = "BF16"
    ts.hf["model.visual.patch_embed.proj.weight"] = torch.from_numpy(np.ascontiguousarray(f.transpose(0, 4, 1, 2, 3)))
    put("patch_embed.proj.bias", rng.standard_normal(D) * 0.1)
    put("pos_embed.weight", rng.standard_normal((v["num_position_embeddings"], D)) * 0.5)
    for i in range(v["depth"]):
        b = f"blocks.{i}."
        norm(b + "norm1")
        linear(b + "attn.qkv", 3 * D, D, 2.0)
        linear(b + "attn.proj", D, D, 1.0)
        norm(b + "norm2")
        linear(b + "mlp.linear_fc1", F, D, 2.0)
        linear(b + "mlp.linear_fc2", D, F, 1.0)
    norm("merger.norm")
    linear("merger.linear_fc1", M, M, 2.0)
    w2 = ts.lin(O, M, 1.0)
    b2 = rng.standard_normal(O) * 0.1
    w2[channels, :] = 0
    b2[channels] = 0
    b2[channels[image_type]] = TYPE_VALUE
    put("merger.linear_fc2.weight", w2)
    put("merger.linear_fc2.bias", b2)


def hf_state(ts):
    """transformers' names for the conditional model: text under model.language_model."""
    out = {}
    for k, v in ts.hf.items():
        if k.startswith("model.") and not k.startswith("model.visual."):
            k = "model.language_model." + k[len("model."):]
        out[k] = v.float()
    return out


def new_model():
    text = {k: v for k, v in dict(COMMON_TEXT, **TEXT).items() if k not in ("model_type", "dtype")}
    cfg = Qwen3_5MoeConfig(text_config=text, vision_config=dict(VISION), image_token_id=IMAGE, video_token_id=VIDEO,
                           vision_start_token_id=START, vision_end_token_id=END, tie_word_embeddings=False)
    for c in (cfg, cfg.text_config, cfg.vision_config):
        c._attn_implementation = "eager"
        if hasattr(c, "_experts_implementation"):
            c._experts_implementation = "eager"
    model = Qwen3_5MoeForConditionalGeneration(cfg)
    for setter, value in (("set_attn_implementation", "eager"), ("set_experts_implementation", "eager")):
        try:
            getattr(model, setter)(value)
        except Exception:  # noqa: BLE001
            pass
    return model.float().eval()


def load(model, ts):
    state = hf_state(ts)
    sd = model.state_dict()
    missing, unexpected = sorted(set(sd) - set(state)), sorted(set(state) - set(sd))
    if missing or unexpected:
        sys.exit(f"{NAME}: HF state dict mismatch: missing {missing} unexpected {unexpected}")
    for k, v in state.items():
        if tuple(sd[k].shape) != tuple(v.shape):
            sys.exit(f"{NAME}: {k}: HF shape {tuple(sd[k].shape)} ours {tuple(v.shape)}")
    model.load_state_dict(state, strict=True)


def prompt_ids(rng, spec, tokens_of):
    """Random text ids (below the special ids) around <|vision_start|> pads <|vision_end|> per image."""
    ids, images = [], []
    for part in spec:
        if isinstance(part, int):
            ids += rng.integers(0, IMAGE, size=part).tolist()
        else:
            ids += [START] + [IMAGE] * tokens_of[part] + [END]
            images.append(part)
    return ids, images


def rope_index(model, ids, grids):
    fn = model.model.get_rope_index
    kw = dict(image_grid_thw=grids, attention_mask=torch.ones_like(ids))
    if "mm_token_type_ids" in inspect.signature(fn).parameters:
        kw["mm_token_type_ids"] = (ids == IMAGE).int()
    pos, delta = fn(ids, **kw)
    return pos, int(delta.reshape(-1)[0])


def main(outdir):
    print("torch", torch.__version__, "transformers", transformers.__version__, flush=True)
    for attempt in range(40):
        if build(outdir, SEED + attempt):
            return
    sys.exit(f"{NAME}: no seed without near-ties")


def build(outdir, seed):
    rng = np.random.default_rng(seed)
    d = os.path.join(outdir, NAME)
    os.makedirs(d, exist_ok=True)
    make_images(rng, d)
    procs = processors()
    pixels = {}  # image -> {processor: (rows, grid)}
    for fname in IMAGES:
        img = Image.open(os.path.join(d, "images", fname))
        pixels[fname] = {}
        for pname, p in procs.items():
            f = p(images=[img], return_tensors="pt")
            pixels[fname][pname] = (f["pixel_values"].float(), f["image_grid_thw"].long())
    tokens_of = {f: int(px["default"][1].prod()) // 4 for f, px in pixels.items()}

    model = new_model()
    ts = Tensors(rng)
    channels, token_type, routers, set_routers = text_weights(ts, dict(COMMON_TEXT, **TEXT), "language_model.model.",
                                                              "language_model.lm_head", "F32")
    image_type = int(rng.integers(0, ROUTE_TYPES))
    vision_weights(ts, channels, image_type)
    set_routers([ROUTE_LOGIT / TYPE_VALUE] * len(routers))
    load(model, ts)

    prompts = {}
    for pname, spec in PROMPTS.items():
        ids, images = prompt_ids(rng, spec, tokens_of)
        ids_t = torch.tensor([ids])
        pv = torch.cat([pixels[f]["default"][0] for f in images])
        grids = torch.cat([pixels[f]["default"][1] for f in images])
        pos, delta = rope_index(model, ids_t, grids)
        types = np.array([channels[image_type] if t == IMAGE else channels[token_type[t]] for t in ids])
        prompts[pname] = dict(ids=ids, images=images, ids_t=ids_t, pv=pv, grids=grids, pos=pos, delta=delta, types=types)

    routes, run, merged = {}, [None], {}

    def router_hook(mod, inp, out):
        if run[0] is not None:
            x = inp[0].reshape(-1, mod.weight.shape[1])
            y = x if run[0] == "calibrate" else torch.nn.functional.linear(x, mod.weight)
            routes.setdefault(run[0], []).append(y.detach().double())

    def merger_hook(mod, inp, out):
        if run[0] is not None:
            merged[run[0]] = out.detach()

    def hooks(m):
        hs = [layer.mlp.gate.register_forward_hook(router_hook) for layer in m.model.language_model.layers]
        hs.append(m.model.visual.merger.register_forward_hook(merger_hook))
        return hs

    def forward(m, p, dtype, tag):
        run[0] = tag
        return m(input_ids=p["ids_t"], pixel_values=p["pv"].to(dtype), image_grid_thw=p["grids"],
                 position_ids=p["pos"], use_cache=True)

    hooks(model)
    with torch.no_grad():
        weakest = []
        for pname, p in prompts.items():
            forward(model, p, torch.float32, "calibrate")
            xs = routes.pop("calibrate")
            T = len(p["ids"])
            weakest.append([float(x[torch.arange(T), torch.as_tensor(p["types"])].min()) for x in xs])
        set_routers([ROUTE_LOGIT / min(col) for col in zip(*weakest)])
        load(model, ts)
        for pname, p in prompts.items():
            out = forward(model, p, torch.float32, pname + ":f32")
            p["prefill"] = out.logits[0].float().numpy()
            p["embeds"] = merged[pname + ":f32"].float().numpy()
            pkv, ids, rows = out.past_key_values, [int(np.argmax(p["prefill"][-1]))], []
            run[0] = pname + ":f32-decode"
            for k in range(DECODE_STEPS):
                at = len(p["ids"]) + k + p["delta"]
                o = model(input_ids=torch.tensor([[ids[-1]]]), past_key_values=pkv, use_cache=True,
                          position_ids=torch.full((3, 1, 1), at, dtype=torch.long))
                pkv = o.past_key_values
                rows.append(o.logits[0, -1].float().numpy())
                ids.append(int(np.argmax(rows[-1])))
            p["decode"], p["greedy"] = np.stack(rows), ids

    # The copies carry the original's hooks (deepcopy copies them): no new ones.
    model_bf16 = copy.deepcopy(model).to(torch.bfloat16)
    with torch.no_grad():
        for pname, p in prompts.items():
            p["prefill_bf16"] = forward(model_bf16, p, torch.bfloat16, pname + ":bf16").logits[0].float().numpy()
    del model_bf16
    f32_runs = [r for k, v in routes.items() if k.endswith(":f32") for r in v]
    bf16_runs = [r for k, v in routes.items() if k.endswith(":bf16") for r in v]
    top_k = TEXT["num_experts_per_tok"]
    if not same_experts(bf16_runs, f32_runs, top_k):
        print(NAME, "seed", seed, "bfloat16 changes the routing", flush=True)
        return False

    f64_error = None
    model_f64 = copy.deepcopy(model).double()
    exact_rope64(model_f64)
    try:
        with torch.no_grad(), float64_casts(model_f64):
            for pname, p in prompts.items():
                p["prefill_f64"] = forward(model_f64, p, torch.float64, pname + ":f64").logits[0].numpy()
                p["embeds_f64"] = merged[pname + ":f64"].numpy()
    except Exception as e:  # noqa: BLE001  (recorded: the float32 references stand without it)
        f64_error = f"{type(e).__name__}: {e}"
        print(NAME, "float64 reference failed:", f64_error, flush=True)
    del model_f64
    run[0] = None

    f64_runs = [r for k, v in routes.items() if k.endswith(":f64") for r in v] if f64_error is None else f32_runs
    decode_runs = [r for k, v in routes.items() if k.endswith(":f32-decode") for r in v]
    greedy_rows = np.concatenate([np.concatenate([p["prefill"][-1:], p["decode"]]) for p in prompts.values()])
    s = np.sort(greedy_rows, axis=-1)
    stats = dict(
        min_router_topk_gap=min(topk_gap(r, top_k) for r in f64_runs + decode_runs),
        max_router_bf16_shift=max(shift(a, b) for a, b in zip(bf16_runs, f64_runs)),
        routing_agrees_f32=same_experts(f32_runs, f64_runs, top_k),
        min_greedy_top2_gap=float((s[:, -1] - s[:, -2]).min()),
        f64_error=f64_error,
    )
    print(NAME, "seed", seed, json.dumps(stats), flush=True)
    if not stats["routing_agrees_f32"] or stats["min_router_topk_gap"] < ROUTE_SAFETY * stats["max_router_bf16_shift"]:
        return False
    if stats["min_greedy_top2_gap"] < MIN_GREEDY_GAP:
        return False
    write(d, ts, prompts, pixels, procs, stats, seed, image_type)
    return True


def exact_rope64(model):
    """Rotary inverse frequencies of the float64 copy computed in float64 (text and tower)."""
    rope = TEXT["rope_parameters"]
    dim = int(TEXT["head_dim"] * rope["partial_rotary_factor"])
    inv = 1.0 / (rope["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    rot = model.model.language_model.rotary_emb
    rot.inv_freq, rot.original_inv_freq = inv, inv.clone()
    vis = model.model.visual.rotary_pos_emb
    vdim = VISION["hidden_size"] // VISION["num_heads"] // 2
    vinv = 1.0 / (10000.0 ** (torch.arange(0, vdim, 2, dtype=torch.float64) / vdim))
    vis.inv_freq = vinv
    if hasattr(vis, "original_inv_freq"):
        vis.original_inv_freq = vinv.clone()


def write(d, ts, prompts, pixels, procs, stats, seed, image_type):
    quant = {"group_size": 64, "bits": 4, "mode": "affine"}
    quant.update(ts.qoverride)
    config = {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"], "model_type": "qwen3_5_moe",
        "text_config": dict(COMMON_TEXT, **TEXT), "vision_config": dict(VISION, model_type="qwen3_5_moe"),
        "image_token_id": IMAGE, "video_token_id": VIDEO, "vision_start_token_id": START, "vision_end_token_id": END,
        "tie_word_embeddings": False, "quantization": quant, "quantization_config": quant,
    }
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(d, "preprocessor_config.json"), "w") as f:
        json.dump(dict(PROCESSOR, image_processor_type="Qwen2VLImageProcessor"), f, indent=2)
    save_safetensors(os.path.join(d, "model.safetensors"),
                     {n: (ts.dtypes.get(n) or gen.NP_DTYPES[a.dtype], a) for n, a in ts.mlx.items()})
    images = {}
    for fname, px in pixels.items():
        stem = fname.removesuffix(".png")
        images[fname] = dict(grid=px["default"][1][0].tolist(), processors={})
        for pname, (rows, grid) in px.items():
            rows.numpy().astype("<f4").tofile(os.path.join(d, f"{stem}.pixels.{pname}.f32"))
            images[fname]["processors"][pname] = dict(rows=list(rows.shape), grid=grid[0].tolist(),
                                                      cls=type(procs[pname]).__name__)
    out = {}
    for pname, p in prompts.items():
        for key, suffix, dt in (("prefill", "prefill.f32", "<f4"), ("prefill_bf16", "prefill_bf16.f32", "<f4"),
                                ("prefill_f64", "prefill_f64.f64", "<f8"), ("decode", "decode.f32", "<f4"),
                                ("embeds", "embeds.f32", "<f4"), ("embeds_f64", "embeds_f64.f64", "<f8")):
            if key in p:
                p[key].astype(dt).tofile(os.path.join(d, f"{pname}.{suffix}"))
        out[pname] = dict(ids=p["ids"], images=p["images"], positions=p["pos"][:, 0, :].tolist(), rope_delta=p["delta"],
                          greedy_ids=p["greedy"], decode_steps=DECODE_STEPS, has_f64="prefill_f64" in p)
    golden = dict(
        name=NAME, seed=seed, image_type=image_type, vocab_size=TEXT["vocab_size"], hidden_size=TEXT["hidden_size"],
        prompts=out, images=images, stats=stats,
        generator=dict(torch=torch.__version__, transformers=transformers.__version__, device="cpu",
                       attn_implementation="eager", experts_implementation="eager",
                       references="float32 (prefill, decode, tower), float64 and bfloat16 (prefill)"),
    )
    with open(os.path.join(d, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "out")
