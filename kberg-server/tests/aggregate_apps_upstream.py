"""An MCP App (the `io.modelcontextprotocol/ui` extension) served by the official Python SDK
over stdio, for the aggregator's tests.

`clock` is bound to the view `ui://clock/app.html` (`_meta.ui.resourceUri`, beside a key of its
own, `example.com/kind`); its result carries a `_meta` of its own, a text block with a `_meta`,
and a resource link to the view with a title and a size. `refresh` is bound to the same view and
is for the app only (`_meta.ui.visibility: ["app"]`). The view is served as
`text/html;profile=mcp-app` with `_meta.ui` (its content security policy and a border), in
`resources/list` and in `resources/read` alike. `chart` names its view the ChatGPT way
(`openai/outputTemplate`) and in the older flat key (`ui/resourceUri`).
Icons (MCP's `icons`, `ICON`) come with `clock`, its result's resource link, the resource
`res://logo`, the template `res://logo/{size}` and the prompt `greet`.
"""
from mcp.server.apps import Apps, ResourceCsp
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, Icon, ResourceLink, TextContent

VIEW = "ui://clock/app.html"
ICON = [
    Icon(
        src="https://icons.example/clock.svg",
        mime_type="image/svg+xml",
        sizes=["any"],
        theme="dark",
    )
]

apps = Apps()


@apps.tool(
    resource_uri=VIEW,
    description="The time, shown on a clock",
    meta={"example.com/kind": "clock"},
    icons=ICON,
)
def clock() -> CallToolResult:
    return CallToolResult(
        content=[
            TextContent(type="text", text="12:00", _meta={"example.com/block": 1}),
            ResourceLink(
                type="resource_link", uri=VIEW, name="app", title="The clock", size=18, icons=ICON
            ),
        ],
        structured_content={"time": "12:00"},
        _meta={"example.com/result": "r"},
    )


@apps.tool(resource_uri=VIEW, visibility=["app"], description="Refreshes the clock")
def refresh() -> str:
    return "refreshed"


apps.add_html_resource(
    VIEW,
    "<html>clock</html>",
    csp=ResourceCsp(connect_domains=["https://time.example.com"]),
    prefers_border=True,
)

server = MCPServer("clock", extensions=[apps])


@server.tool(description="A chart", meta={"openai/outputTemplate": VIEW, "ui/resourceUri": VIEW})
def chart() -> str:
    return "chart"


@server.resource("res://logo", icons=ICON)
def logo() -> str:
    return "logo"


@server.resource("res://logo/{size}", icons=ICON)
def sized_logo(size: str) -> str:
    return "logo " + size


@server.prompt(icons=ICON)
def greet() -> str:
    return "Hello"


server.run()
