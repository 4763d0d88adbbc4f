"""Write torchvision's ResNet-18/34 (BasicBlock) as a memprof scenario, for advice benchmarks and
tests: `python bench/resnet_yaml.py 18 > resnet18.yaml`.

torchvision/models/resnet.py's layout: conv1 7x7/2, bn1, relu, maxpool 3/2; four stages of
BasicBlocks (conv3x3-bn-relu-conv3x3-bn, `out += identity`, relu; one ReLU module per block,
called twice), the first block of stages 2-4 downsampling with conv1x1/2 + bn; avgpool, fc,
cross-entropy. Variants: `torchvision` (ReLU(inplace=True) and `+=`, torchvision's choice) and
`inplace_off`.
"""

from __future__ import annotations

import sys

LAYERS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3)}


def resnet_yaml(depth: int = 18, batch: int = 2, size: int = 224, classes: int = 1000) -> str:
    mods: list[str] = []
    prog: list[str] = []

    def conv(name, cin, cout, k, stride, pad):
        mods.append(
            f"  {name}: {{type: Conv2d, in_channels: {cin}, out_channels: {cout}, "
            f"kernel_size: {k}, stride: {stride}, padding: {pad}, bias: false}}"
        )

    def bn(name, c):
        mods.append(f"  {name}: {{type: BatchNorm2d, num_features: {c}}}")

    conv("conv1", 3, 64, 7, 2, 3)
    bn("bn1", 64)
    mods.append("  relu: {type: ReLU, inplace: $inplace}")
    mods.append("  maxpool: {type: MaxPool2d, kernel_size: 3, stride: 2, padding: 1}")
    prog += [
        "  - {id: stem_conv, module: conv1, in: x}",
        "  - {id: stem_bn, module: bn1, in: stem_conv}",
        "  - {id: stem_relu, module: relu, in: stem_bn}",
        "  - {id: pool, module: maxpool, in: stem_relu}",
    ]
    cin, last = 64, "pool"
    for stage, blocks in enumerate(LAYERS[depth], start=1):
        cout = 64 * 2 ** (stage - 1)
        for b in range(blocks):
            p = f"l{stage}_{b}"
            stride = 2 if stage > 1 and b == 0 else 1
            conv(f"{p}_conv1", cin, cout, 3, stride, 1)
            bn(f"{p}_bn1", cout)
            mods.append(f"  {p}_relu: {{type: ReLU, inplace: $inplace}}")
            conv(f"{p}_conv2", cout, cout, 3, 1, 1)
            bn(f"{p}_bn2", cout)
            prog += [
                f"  - {{id: {p}_c1, module: {p}_conv1, in: {last}}}",
                f"  - {{id: {p}_n1, module: {p}_bn1, in: {p}_c1}}",
                f"  - {{id: {p}_r1, module: {p}_relu, in: {p}_n1}}",
                f"  - {{id: {p}_c2, module: {p}_conv2, in: {p}_r1}}",
                f"  - {{id: {p}_n2, module: {p}_bn2, in: {p}_c2}}",
            ]
            identity = last
            if stride != 1 or cin != cout:
                conv(f"{p}_down", cin, cout, 1, stride, 0)
                bn(f"{p}_down_bn", cout)
                prog += [
                    f"  - {{id: {p}_dc, module: {p}_down, in: {last}}}",
                    f"  - {{id: {p}_id, module: {p}_down_bn, in: {p}_dc}}",
                ]
                identity = f"{p}_id"
            prog += [
                f"  - {{id: {p}_add, op: add, in: [{p}_n2, {identity}], inplace: $inplace}}",
                f"  - {{id: {p}_out, module: {p}_relu, in: {p}_add}}",
            ]
            cin, last = cout, f"{p}_out"
    mods.append("  avgpool: {type: AdaptiveAvgPool2d, output_size: 1}")
    mods.append("  flatten: {type: Flatten}")
    mods.append(f"  fc: {{type: Linear, in_features: 512, out_features: {classes}}}")
    mods.append("  loss_fn: {type: CrossEntropyLoss}")
    prog += [
        f"  - {{id: gap, module: avgpool, in: {last}}}",
        "  - {id: flat, module: flatten, in: gap}",
        "  - {id: logits, module: fc, in: flat}",
        "  - {id: loss, module: loss_fn, in: [logits, target]}",
    ]
    return "\n".join(
        [
            f"# torchvision ResNet-{depth} (BasicBlock), written by bench/resnet_yaml.py",
            f"name: resnet{depth}",
            "device: cpu",
            "seed: 0",
            "inputs:",
            f"  x: {{shape: [{batch}, 3, {size}, {size}], init: randn}}",
            f"  target: {{shape: [{batch}], init: randint, high: {classes}, dtype: int64}}",
            "modules:",
            *mods,
            "program:",
            *prog,
            "phases:",
            "  - forward",
            "  - backward: loss",
            "variants:",
            "  torchvision: {inplace: true}",
            "  inplace_off: {inplace: false}",
            "baseline: inplace_off",
            "",
        ]
    )


if __name__ == "__main__":
    sys.stdout.write(resnet_yaml(int(sys.argv[1]) if len(sys.argv) > 1 else 18))
