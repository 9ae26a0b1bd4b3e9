//! The OpenAPI 3.1 description of every HTTP route, which `api.rs` serves at
//! `GET /admin/openapi.json`.
//!
//! Generated, not written: each handler describes itself with `#[utoipa::path]`, its bodies are
//! the types of `model.rs`, and the route tables (`api::admin_routes`, `api::open_routes`)
//! register every route together with its description, so the document cannot list a route the
//! router does not serve or miss one it does. This module assembles the two tables' descriptions
//! into one document: the admin token's security requirement and its 401/403 answers are added to
//! exactly the routes the token check guards.

use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::schema::{AllOfBuilder, ObjectBuilder, OneOfBuilder, Schema};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ComponentsBuilder, ContentBuilder, InfoBuilder, OpenApi, OpenApiBuilder, Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

use crate::api::model::{ErrorBody, OpenApiRegistration};

/// The name of the admin token's security scheme.
const ADMIN_TOKEN: &str = "adminToken";

/// The whole document from the two route tables' descriptions: their operations, the schemas
/// they use and the admin token's scheme on `admin`'s operations.
pub fn document(mut admin: OpenApi, open: OpenApi) -> OpenApi {
    guarded_by_admin_token(&mut admin);
    let mut document = OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("mcpbootd admin API")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(
                    "Register, inspect, call and delete hosted MCP servers. Errors are always \
                     {\"error\": {\"code\", \"message\"}}; `code` is one of the ErrorCode values.",
                ))
                .build(),
        )
        .components(Some(
            ComponentsBuilder::new()
                .security_scheme(
                    ADMIN_TOKEN,
                    SecurityScheme::Http(
                        HttpBuilder::new()
                            .scheme(HttpAuthScheme::Bearer)
                            .description(Some("[admin] token; required when one is configured"))
                            .build(),
                    ),
                )
                .build(),
        ))
        .build();
    document.merge(admin);
    document.merge(open);
    require_one_description(&mut document);
    document
}

/// An API-description registration has every field optional but needs exactly one of
/// `openapi` and `openapi_spec` (the daemon routes a body by which it has); the derive cannot
/// say so, so the rule is added to the generated schema.
fn require_one_description(document: &mut OpenApi) {
    let Some(components) = document.components.as_mut() else { return };
    let name = OpenApiRegistration::name().into_owned();
    if let Some(RefOr::T(fields)) = components.schemas.remove(&name) {
        let either = OneOfBuilder::new()
            .item(ObjectBuilder::new().required("openapi"))
            .item(ObjectBuilder::new().required("openapi_spec"));
        let schema = AllOfBuilder::new().item(fields).item(either).build();
        components.schemas.insert(name, RefOr::T(Schema::AllOf(schema)));
    }
}

/// Marks every operation as needing the admin token, with the 401 and 403 the check answers,
/// and makes sure the error schemas are in the document.
fn guarded_by_admin_token(document: &mut OpenApi) {
    for item in document.paths.paths.values_mut() {
        for operation in operations(item) {
            operation.security = Some(vec![SecurityRequirement::new(ADMIN_TOKEN, Vec::<String>::new())]);
            for (status, description) in [("401", "no admin token"), ("403", "wrong admin token")] {
                let body = ContentBuilder::new().schema(Some(Ref::from_schema_name(ErrorBody::name()))).build();
                let response = ResponseBuilder::new().description(description).content("application/json", body);
                operation.responses.responses.insert(status.into(), RefOr::T(response.build()));
            }
        }
    }
    let components = document.components.get_or_insert_with(Default::default);
    let mut schemas = vec![(ErrorBody::name().into_owned(), ErrorBody::schema())];
    ErrorBody::schemas(&mut schemas);
    components.schemas.extend(schemas);
}

fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .filter_map(Option::as_mut)
}
