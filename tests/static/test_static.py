"""Static checks: yamllint, ansible-lint (production profile), changelog fragments, pep8 as ansible-test sees it,
ansible-test sanity."""

import pytest

from runner import run


def test_yamllint():
    run("yamllint", ["yamllint", "--strict", "."])


def test_ansible_lint_production_profile():
    run("ansible-lint", ["ansible-lint", "--profile", "production", "--offline", "--nocolor"])


def test_changelog_fragments_lint():
    run("changelog-lint", ["antsibull-changelog", "lint"])


def test_pep8_as_ansible_test_sanity_checks_it():
    """ansible-test's pep8 (its pycodestyle, its line length and ignore list) in seconds, for make fast."""
    run("pep8", ["python", "-m", "pycodestyle", "--max-line-length", "160", "--ignore", "E402,W503,W504,E741,E203,E701,E704",
                 "plugins", "tests", "scripts"])


@pytest.mark.slow
def test_ansible_test_sanity():
    run("sanity", ["bash", "scripts/sanity.sh"], timeout=2400)
