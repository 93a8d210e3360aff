"""bench.gpu_suite runs end to end in its tiny CPU mode and writes every section (the GPU figures
themselves need a GPU; this keeps the prepared suite working until one is lent)."""

from __future__ import annotations

from bench.gpu_suite import main


def test_gpu_suite_tiny_on_cpu_writes_every_section(tmp_path):
    out = tmp_path / "gpu_suite.md"
    code = main(["--device", "cpu", "--tiny", "--threads", "1", "--out", str(out)])
    text = out.read_text()
    assert code == 0, text
    for heading in ("## 1. Imports", "## 2. SimCLR ResNet-18", "## 3. The paper's pipeline", "## 4. Tracking",
                    "## 5. Lanczos", "## 6. The CuPy row"):
        assert heading in text
    assert "Failed sections: none." in text
    assert "| fp32 |" in text and "| bf16 |" in text and "failed:" not in text


def test_gpu_suite_refuses_cuda_without_a_gpu(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["--device", "cuda", "--tiny"]) == 2
    assert "no CUDA device" in capsys.readouterr().err
