"""The validator's deferred imports: GE builds without scipy.stats and altair, an expectation
that needs them still runs, and a stand-in answers as the module it stands for (run in fresh
interpreters, where nothing imported them yet)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from ticdc_lake.quality.validator import DeferredModule


def run_fresh(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.slow  # a few seconds: out of the fast tier
def test_ge_builds_without_the_deferred_modules_and_its_kl_divergence_check_still_runs():
    found = run_fresh(
        "import json, sys, pandas as pd\n"
        "from ticdc_lake.quality.validator import DeferredModule, Expectation, Validator, "
        "expectations\n"
        "validator = Validator(); gxe = expectations(); validator.context\n"
        "deferred = [n for n in ('scipy.stats', 'altair') "
        "if isinstance(sys.modules[n], DeferredModule)]\n"
        "check = gxe.ExpectColumnKLDivergenceToBeLessThan(column='x', threshold=0.1, "
        "partition_object={'values': [1, 2], 'weights': [0.5, 0.5]})\n"
        "frame = pd.DataFrame({'x': [1, 2, 1, 2]})\n"
        "outcome, = validator.run(frame, [Expectation('kl', check)])\n"
        "print(json.dumps({'deferred': deferred, 'success': outcome.success, "
        "'observed': outcome.observed, "
        "'loaded': type(sys.modules['scipy.stats']).__name__}))"
    )
    assert found["deferred"] == ["scipy.stats", "altair"]
    assert found["success"] is True  # computed by scipy.stats.entropy, loaded on the way
    assert found["observed"]["expect_column_kl_divergence_to_be_less_than"] == 0.0
    assert found["loaded"] == "module"


def test_a_deferred_module_imports_itself_at_its_first_attribute():
    found = run_fresh(
        "import json, sys\n"
        "from ticdc_lake.quality.validator import DeferredModule, defer_unused_modules\n"
        "defer_unused_modules(['json.decoder', 'colorsys', 'no_such_package.module'])\n"
        "absent = 'no_such_package.module' not in sys.modules\n"
        "kept = type(sys.modules['json.decoder']).__name__\n"
        "import colorsys\n"
        "standing = isinstance(sys.modules['colorsys'], DeferredModule)\n"
        "from colorsys import rgb_to_hsv\n"
        "print(json.dumps({'absent': absent, 'kept': kept, 'standing': standing, "
        "'hsv': rgb_to_hsv(1, 0, 0), "
        "'loaded': type(sys.modules['colorsys']).__name__, "
        "'same': colorsys.hls_to_rgb is sys.modules['colorsys'].hls_to_rgb, "
        "'unloaded': (sys.modules.pop('colorsys') and hasattr(colorsys, 'no_such_name'))}))"
    )
    assert found["absent"] is True  # not installed: nothing stands in for it
    assert found["kept"] == "module"  # already imported: left as it was
    assert found["standing"] is True  # imported by name only: not loaded yet
    assert found["hsv"] == [0.0, 1.0, 1]
    assert found["loaded"] == "module"
    assert found["same"] is True  # the stand-in serves the loaded module's own objects
    assert found["unloaded"] is False  # a name it lacks is an AttributeError, as for a module


def test_a_deferred_module_that_cannot_import_raises_at_each_use():
    name = "ticdc_lake_no_such_module"
    stand_in = DeferredModule(name)
    sys.modules[name] = stand_in
    try:
        for _ in range(2):
            with pytest.raises(ModuleNotFoundError, match=name):
                stand_in.anything  # noqa: B018
            assert sys.modules[name] is stand_in
    finally:
        del sys.modules[name]
