"""Static checks: yamllint, ansible-lint (production profile), changelog fragments, ansible-test sanity."""

import pytest

from runner import run


def test_yamllint():
    run("yamllint", ["yamllint", "--strict", "."])


def test_ansible_lint_production_profile():
    run("ansible-lint", ["ansible-lint", "--profile", "production", "--offline", "--nocolor"])


def test_changelog_fragments_lint():
    run("changelog-lint", ["antsibull-changelog", "lint"])


@pytest.mark.slow
def test_ansible_test_sanity():
    run("sanity", ["bash", "scripts/sanity.sh"], timeout=2400)
