"""Review 22: the export's file name is safe whatever the URL's platform."""

from __future__ import annotations

from tests.web.security.rig import Rig


async def test_the_export_file_name_cannot_break_its_header(rig: Rig) -> None:
    csrf = await rig.login()
    async with rig.http.post(
        f"{rig.base}/people/a%22%3Bb%0D%0AX-Evil:%201/7/export", data={"csrf": csrf}
    ) as r:
        assert r.status == 200
        assert r.headers["Content-Disposition"] == (
            'attachment; filename="personabot-export-abX-Evil1-7.json"'
        )
        assert "X-Evil" not in r.headers
