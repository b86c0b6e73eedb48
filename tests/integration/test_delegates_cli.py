"""`inner-plane delegates add|set|show|list|remove`: the person each delegate serves. Bad input
names the field and stores nothing."""

from __future__ import annotations

import json
import uuid

from sqlalchemy import text
from typer.testing import CliRunner

from inner_plane.cli import app
from inner_plane.people import directory
from inner_plane.runtime import Runtime

cli = CliRunner()


def _rows(runtime: Runtime) -> list[tuple[str, ...]]:
    with runtime.engine.connect() as connection:
        return [tuple(map(str, r)) for r in connection.execute(text("SELECT * FROM people"))]


def test_add_show_set_list_remove(runtime: Runtime) -> None:
    added = cli.invoke(
        app,
        [
            "delegates", "add", "ada", "--name", "Ada", "--time-zone", "Europe/Berlin",
            "--email", "ada@example.org", "--phone", "+49 151 12345678",
            "--quiet", "22:00-07:00", "--json",
        ],
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    person = json.loads(added.stdout)
    assert person["phones"] == ["+4915112345678"] and person["preferred_channel"] == "email"
    assert person["quiet_hours"] == {"start": "22:00", "end": "07:00"}

    shown = cli.invoke(app, ["delegates", "show", "ada", "--json"])
    assert json.loads(shown.stdout) == person

    changed = cli.invoke(
        app,
        ["delegates", "set", "ada", "--webhook", "https://hooks.example.org/ada",
         "--prefer", "webhook", "--clear", "quiet_hours", "--json"],
    )  # fmt: skip
    assert changed.exit_code == 0, changed.output
    after = json.loads(changed.stdout)
    assert after["preferred_channel"] == "webhook" and after["quiet_hours"] is None
    assert after["emails"] == ["ada@example.org"]  # untouched

    cli.invoke(app, ["delegates", "add", "bob", "--name", "Bob"])
    listed = json.loads(cli.invoke(app, ["delegates", "list", "--json"]).stdout)
    assert [p["delegate_id"] for p in listed] == ["ada", "bob"]
    assert listed[1]["preferred_channel"] == "app"  # no contact point: the conversation

    assert cli.invoke(app, ["delegates", "remove", "bob"]).exit_code == 0
    gone = cli.invoke(app, ["delegates", "show", "bob"])
    assert gone.exit_code == 1 and "no person" in gone.stderr


def test_bad_input_names_the_field_and_stores_nothing(runtime: Runtime) -> None:
    cli.invoke(app, ["delegates", "add", "ada", "--name", "Ada", "--email", "ada@example.org"])
    before = _rows(runtime)
    for arguments, field in [
        (["add", "x y", "--name", "X"], "delegate_id"),
        (["add", "cy", "--name", "Cy", "--time-zone", "Nowhere/City"], "time_zone"),
        (["add", "cy", "--name", "Cy", "--phone", "12345"], "phone"),
        (["add", "cy", "--name", "Cy", "--email", "nope"], "email"),
        (["add", "cy", "--name", "Cy", "--prefer", "email"], "preferred_channel"),
        (["add", "cy", "--name", "Cy", "--webhook", "javascript:alert(1)"], "webhook_url"),
        (["add", "ada", "--name", "Ada again"], "delegate_id"),
        (["set", "ada", "--prefer", "webhook"], "preferred_channel"),
        (["set", "ada", "--clear", "emails"], "preferred_channel"),
        (["set", "ada", "--quiet", "9pm-7am"], "quiet_hours"),
        (["set", "ada", "--time-zone", "CEST"], "time_zone"),
    ]:
        result = cli.invoke(app, ["delegates", *arguments])
        assert result.exit_code == 2, (arguments, result.output)
        assert result.stderr.startswith(f"inner-plane: error: {field}:"), result.stderr
    assert _rows(runtime) == before
    missing = cli.invoke(app, ["delegates", "set", "nobody", "--name", "N"])
    assert missing.exit_code == 1 and "no person" in missing.stderr
    assert directory.get(runtime, "nobody") is None


def test_a_stored_zone_the_system_no_longer_knows_fails_nothing(runtime: Runtime) -> None:
    """A row written valid whose zone later left the tz database: listing, routing and the
    composer's time go on (the zone's quiet hours are not applied; the configured zone is)."""
    from datetime import UTC, datetime

    from inner_plane.activation.model import Activation, Trigger
    from inner_plane.composer.compose import ContextComposer
    from inner_plane.outbound.route import route

    directory.add(runtime, "ada", display_name="Ada", quiet_hours="00:00-23:59")
    with runtime.engine.begin() as connection:
        connection.execute(
            text("UPDATE people SET time_zone = 'Gone/Away' WHERE delegate_id = 'ada'")
        )
    listed = cli.invoke(app, ["delegates", "list", "--json"])
    assert listed.exit_code == 0 and json.loads(listed.stdout)[0]["time_zone"] == "Gone/Away"
    assert route(runtime, "ada", [], datetime.now(UTC)).not_before is None
    # Both ways the composer learns the zone: read by itself, or as the lane's opening read it.
    for given in (None, "Gone/Away"):
        activation = Activation(
            id=uuid.uuid4(),
            delegate_id="ada",
            trigger=Trigger.WAKE,
            epoch=1,
            now=datetime.now(UTC),
            signals=(),
            person_zone=given,
        )
        zone, whose = ContextComposer(runtime)._zone_of(activation)
        assert zone.key == runtime.settings.delegate_timezone and whose == "the delegate's"
