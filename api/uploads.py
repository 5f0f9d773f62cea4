"""Request bodies that are JSON or a ``multipart/form-data`` upload, on the same route.

``POST /v1/documents`` takes inline text as JSON or one file as ``file``; ``POST
/v1/ingest/jobs`` takes server-side paths as JSON or a zip/tar(.gz) as ``archive``. FastAPI
declares one body type per route, so these routes read the body themselves (:func:`json_body`,
:func:`read_form`) and document both media types with :func:`request_body` (Swagger UI shows a
media-type switch and a file picker). The body limit of :class:`api.app.BodyLimit` applies to
uploads as to any body.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import PurePosixPath
from typing import Any, ClassVar, TypeVar

from fastapi import Request
from pydantic import BaseModel, Field, ValidationError, field_validator
from starlette.datastructures import UploadFile

from api.bodies import Body
from api.errors import ApiError
from api.models import CALLBACK_URL, DocumentBody
from ingest.ops import IngestOp, UploadedFile, prepare_op
from ingest.parsers import ParseError, detect_upload
from ragstream.settings import Settings
from topics.acl import MAX_PRINCIPALS, normalise_readers
from topics.ingest import DOC_ID_PATTERN

M = TypeVar("M", bound=BaseModel)
JSON = "application/json"
MULTIPART = "multipart/form-data"
#: Form fields besides the file: a few short values, never many.
MAX_FIELDS = 16
_PRINCIPAL = r"(?:user|group):[A-Za-z0-9._@+=\-]{1,128}"
#: A form's ``readers``: 1-100 principals (``topics.acl.PRINCIPAL_PATTERN``) separated by commas,
#: spaces allowed around each; stated in the OpenAPI document and checked by it.
READERS_FORM_PATTERN = rf"^ *{_PRINCIPAL} *(?:, *{_PRINCIPAL} *){{0,{MAX_PRINCIPALS - 1}}}$"
_READERS_FORM = re.compile(READERS_FORM_PATTERN)
#: The schema of ``readers`` states the pattern; the validator checks it after the principals
#: (whose message names the bad one).
_READERS_SCHEMA: dict[str, Any] = {"pattern": READERS_FORM_PATTERN}
#: A form's ``metadata`` is one JSON part: the OpenAPI document states it as the JSON body's
#: ``metadata`` object (OpenAPI 3.1 sends an object property of a multipart body as an
#: ``application/json`` part), so a client or fuzzer sends the object a server accepts.
METADATA_FORM_SCHEMA: dict[str, Any] = {
    **{
        k: v
        for k, v in DocumentBody.model_json_schema()["properties"]["metadata"].items()
        if k != "default"
    },
    "description": "A JSON object of at most 64 scalars (65,536 characters at most), e.g. "
    '{"lang": "en"}.',
}


class _ReadersForm(Body):
    """A form with a ``readers`` field (comma-separated principals; each form declares it with
    its own description): checked at validation, read with :meth:`readers_tuple`."""

    readers: str | None = Field(default=None, max_length=16_384, json_schema_extra=_READERS_SCHEMA)

    @field_validator("readers")
    @classmethod
    def _readers_are_principals(cls, value: str | None) -> str | None:
        _split_readers(value)  # PrincipalError is a ValueError: a 422 naming the field
        if value is not None and not _READERS_FORM.fullmatch(value):  # what the spec states
            raise ValueError(
                f"principals separated by commas, no empty one, at most {MAX_PRINCIPALS}"
            )
        return value

    def readers_tuple(self) -> tuple[str, ...] | None:
        """``readers`` as principals (validated), or ``None``."""
        return _split_readers(self.readers)


class DocumentForm(_ReadersForm):
    """``POST /v1/documents`` as ``multipart/form-data``: the fields beside ``file``."""

    doc_id: str | None = Field(
        default=None, min_length=1, max_length=512, pattern=DOC_ID_PATTERN,
        description="Defaults to the file's name (which must then be a valid id).",
    )  # fmt: skip
    title: str | None = Field(default=None, max_length=1024, pattern=r"^[^\x00]*$")
    source: str | None = Field(
        default=None, max_length=2048, pattern=r"^[^\x00]*$",
        description="Defaults to the file's name.",
    )  # fmt: skip
    #: Form fields that are one JSON part each, with the schema the OpenAPI document states.
    JSON_PARTS: ClassVar[dict[str, dict[str, Any]]] = {"metadata": METADATA_FORM_SCHEMA}
    metadata: str | None = Field(default=None, max_length=65_536)

    @field_validator("metadata")
    @classmethod
    def _metadata_object(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not JSON: {exc}") from exc
        scalars = (str, int, float, bool, type(None))
        if not isinstance(decoded, dict) or len(decoded) > 64:
            raise ValueError("must be a JSON object of at most 64 fields")
        if not all(isinstance(v, scalars) for v in decoded.values()):
            raise ValueError("values must be strings, numbers, booleans or null")
        return value

    readers: str | None = Field(
        default=None, max_length=16_384, json_schema_extra=_READERS_SCHEMA,
        description="Who may read it: principals separated by commas, e.g. "
        "'group:eng,user:ada'; absent: keep its readers (new: everyone of the tenant).",
    )  # fmt: skip

    def metadata_dict(self) -> dict[str, str | int | float | bool | None]:
        """``metadata`` decoded (validated to be an object of scalars)."""
        return dict(json.loads(self.metadata)) if self.metadata else {}


class JobForm(_ReadersForm):
    """``POST /v1/ingest/jobs`` as ``multipart/form-data``: the fields beside ``archive``."""

    callback_url: str | None = Field(default=None, max_length=2048, pattern=CALLBACK_URL)
    readers: str | None = Field(
        default=None, max_length=16_384, json_schema_extra=_READERS_SCHEMA,
        description="Who may read every document of the job: principals separated by commas.",
    )  # fmt: skip


def _split_readers(value: str | None) -> tuple[str, ...] | None:
    """Comma-separated principals as a document's readers (``None`` stays ``None``).

    Raises:
        PrincipalError: as :func:`topics.acl.normalise_readers`.
    """
    if value is None:
        return None
    return normalise_readers(p for p in value.split(",") if p.strip())


def media_type(request: Request) -> str:
    """The request's media type, lower case, without parameters."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def json_body(request: Request, model: type[M], *, upload_field: str) -> M:
    """The JSON body validated as ``model``.

    Raises:
        ApiError: 415 when the body is neither JSON nor multipart (naming both).
        ApiError: 422 for invalid JSON or fields, each field in ``details``.
    """
    media = media_type(request)
    if media and media != JSON and not media.endswith("+json"):
        raise ApiError(
            415,
            "UNSUPPORTED_MEDIA_TYPE",
            f"Content-Type {media!r} is not supported here: send 'application/json', or "
            f"'multipart/form-data' with the file as {upload_field!r}",
        )
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as exc:
        raise invalid_body(exc) from exc


async def read_form(
    request: Request, model: type[M], file_field: str
) -> tuple[M, UploadFile, bytes]:
    """The form's fields validated as ``model``, its file part ``file_field`` and its bytes.

    Raises:
        ApiError: 422 when the file part is missing, not a file, or empty, or for invalid or
            unknown fields (each in ``details``).
    """
    async with request.form(max_files=1, max_fields=MAX_FIELDS) as form:  # closes its files
        upload = form.get(file_field)
        if not isinstance(upload, UploadFile):
            raise ApiError(422, "INVALID_REQUEST", f"{file_field}: a file part is required")
        fields = {k: v for k, v in form.multi_items() if k != file_field}
        try:
            values = model.model_validate(fields)
        except ValidationError as exc:
            raise invalid_body(exc) from exc
        data = await upload.read()
    if not data:
        raise ApiError(422, "INVALID_REQUEST", f"{file_field}: the file is empty")
    return values, upload, data


async def check_document(
    settings: Settings, tenant: str, doc_id: str, data: bytes, upload: UploadFile
) -> tuple[str, IngestOp]:
    """Sniff the uploaded document's format and prepare its op, parsed here once with the
    function and settings the ingest pool uses (:func:`ingest.ops.prepare_op`): the caller stores
    that parse beside the upload, so the pool does not parse the file again.

    Returns:
        The short name of its format (``pdf``, ``docx``, ``markdown``, ...) and the op, with
        its ``parsed`` documents.

    Raises:
        ApiError: 415 for a format no parser handles; 422 when the parser refuses the file
            (corrupt, encrypted, empty, no text layer), with the parser's reason.
    """
    name = upload.filename or "the file"
    try:
        kind = detect_upload(data, filename=upload.filename, content_type=upload.content_type)
    except ParseError as exc:
        raise ApiError(415, "UNSUPPORTED_MEDIA_TYPE", f"file: {exc}") from exc
    source = UploadedFile(data, upload.filename, kind)
    try:
        op = await asyncio.to_thread(
            prepare_op, tenant, doc_id, source, settings.ingest, parse_now=True
        )
    except ParseError as exc:
        raise ApiError(422, "INVALID_REQUEST", f"file {name!r}: {exc}") from exc
    return kind, op


def invalid_body(exc: ValidationError) -> ApiError:
    """The typed 422 of a body that failed validation: ``"body.<field>: <message>"`` and every
    field error in ``details`` (the shape :mod:`api.errors` gives FastAPI's own)."""
    details = [
        {
            "field": ".".join(str(p) for p in ("body", *e["loc"])),
            "message": e["msg"],
            "type": e["type"],
        }
        for e in exc.errors(include_url=False)
    ]
    first = details[0]
    return ApiError(
        422, "INVALID_REQUEST", f"{first['field']}: {first['message']}", details=details
    )


def file_name(upload: UploadFile) -> str | None:
    """The upload's base name (a client may send a path), or None."""
    if not upload.filename:
        return None
    base = PurePosixPath(upload.filename.replace("\\", "/")).name
    return base or None


def request_body(json_model: type[BaseModel], form: type[BaseModel], file_field: str) -> Any:
    """``openapi_extra`` of a route taking ``json_model`` as JSON or ``form`` plus the file
    ``file_field`` as ``multipart/form-data``; the form's ``JSON_PARTS`` are stated as the
    JSON values they hold, each an ``application/json`` part (``encoding``)."""
    json_parts: dict[str, dict[str, Any]] = getattr(form, "JSON_PARTS", {})
    form_schema = form.model_json_schema()
    form_schema["properties"] = {
        file_field: {"type": "string", "format": "binary", "description": "The file."},
        **form_schema["properties"],
        **json_parts,
    }
    form_schema["required"] = [file_field, *form_schema.get("required", [])]
    multipart: dict[str, Any] = {"schema": form_schema}
    if json_parts:
        multipart["encoding"] = {name: {"contentType": JSON} for name in json_parts}
    return {
        "requestBody": {
            "required": True,
            "content": {JSON: {"schema": json_model.model_json_schema()}, MULTIPART: multipart},
        }
    }
